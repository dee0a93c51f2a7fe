"""Dramatiq side of the redis section: a ``RedisBroker`` on ``BENCH_REDIS_URL`` and two actors.

Runs in the peers' virtualenv only; the worker loads it as ``dramatiq dramatiq_app``. The no-op
appends one byte to the O_APPEND file named by ``BENCH_MARKER`` (workers only), the latency
actor one 16-byte record (ms from enqueue to start), exactly like AsyncTask's
``bench/core/noop_jobs.py``.
"""

from __future__ import annotations

import os

import dramatiq  # type: ignore[import-not-found]  # in the peers' venv only
import marker  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH
from dramatiq.brokers.redis import RedisBroker  # type: ignore[import-not-found]

#: Dramatiq's defaults: its default middleware (age and time limits, retries, callbacks,
#: pipelines, shutdown notifications), no result backend.
broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)

noop = dramatiq.actor(actor_name="noop", queue_name="default")(marker.noop)
latency = dramatiq.actor(actor_name="latency", queue_name="default")(marker.latency)
