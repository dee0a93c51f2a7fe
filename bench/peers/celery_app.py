"""Celery side of the redis section: an app on the Redis broker ``BENCH_REDIS_URL`` and its two tasks.

Runs in the peers' virtualenv only; the worker loads it as ``-A celery_app``. The no-op
appends one byte to the O_APPEND file named by ``BENCH_MARKER`` (workers only), the latency
task one 16-byte record (ms from enqueue to start), exactly like AsyncTask's
``bench/core/noop_jobs.py``, so all systems are timed the same way.
"""

from __future__ import annotations

import os

import marker  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH
from celery import Celery  # type: ignore[import-not-found]  # in the peers' venv only

#: Celery's defaults apart from the queue's name: no result backend, acks on receipt,
#: prefetch multiplier 4.
app = Celery("celery_app", broker=os.environ["BENCH_REDIS_URL"])
# Celery's own default queue is "celery"; every system of the bench uses "default".
app.conf.task_default_queue = "default"

noop = app.task(name="noop")(marker.noop)
latency = app.task(name="latency")(marker.latency)
