"""Celery side of the redis section: an app on the Redis broker ``BENCH_REDIS_URL`` and its two tasks.

Runs in the peers' virtualenv only; the worker loads it as ``-A celery_app``. The no-op
appends one byte to the O_APPEND file named by ``BENCH_MARKER`` (workers only), the latency
task one 16-byte record (ms from enqueue to start), exactly like AsyncTask's
``bench/core/noop_jobs.py``, so all systems are timed the same way.
"""

from __future__ import annotations

import os
import time

from celery import Celery  # type: ignore[import-not-found]  # in the peers' venv only

#: Celery's defaults apart from the queue's name: no result backend, acks on receipt,
#: prefetch multiplier 4.
app = Celery("celery_app", broker=os.environ["BENCH_REDIS_URL"])
# Celery's own default queue is "celery"; every system of the bench uses "default".
app.conf.task_default_queue = "default"

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


@app.task(name="noop")  # type: ignore[untyped-decorator]
def noop() -> None:
    os.write(_marker, b".")


@app.task(name="latency")  # type: ignore[untyped-decorator]
def latency(sent: float) -> None:
    os.write(_marker, b"%15.6f\n" % ((time.time() - sent) * 1000))
