"""RQ side of the redis section: the two job functions, found by the worker as ``rq_jobs.noop``
and ``rq_jobs.latency``.

Runs in the peers' virtualenv only. The no-op appends one byte to the O_APPEND file named by
``BENCH_MARKER`` (workers only), the latency job one 16-byte record (ms from enqueue to
start), exactly like AsyncTask's ``bench/core/noop_jobs.py``. RQ's default worker imports this
module in each job's forked work horse (its parent never runs a job), so there the file is
opened once per job: part of what that worker costs.
"""

from __future__ import annotations

import os
import time

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


def noop() -> None:
    os.write(_marker, b".")


def latency(sent: float) -> None:
    os.write(_marker, b"%15.6f\n" % ((time.time() - sent) * 1000))
