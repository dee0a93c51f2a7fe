"""Huey side of the redis section: a ``RedisHuey`` on ``BENCH_REDIS_URL`` and its two tasks.

Runs in the peers' virtualenv only; the consumer loads it as ``huey_redis_app.huey``. The
no-op appends one byte to the O_APPEND file named by ``BENCH_MARKER`` (workers only), the
latency task one 16-byte record (ms from enqueue to start), exactly like AsyncTask's
``bench/core/noop_jobs.py``.
"""

from __future__ import annotations

import os
import time

import marker  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH
from huey import RedisHuey  # type: ignore[import-not-found]  # in the peers' venv only

#: Huey's defaults: blocking dequeue (BRPOP, 1 s timeout), results stored (a None result is not).
#: The name is the queue's: its Redis list is ``huey.redis.default``.
huey = RedisHuey("default", url=os.environ["BENCH_REDIS_URL"])


# Huey's own functions, not marker's: Huey names a task by its function's module.
@huey.task(name="noop")  # type: ignore[untyped-decorator]
def noop() -> None:
    os.write(marker.FD, b".")


@huey.task(name="latency")  # type: ignore[untyped-decorator]
def latency(sent: float) -> None:
    os.write(marker.FD, b"%15.6f\n" % ((time.time() - sent) * 1000))
