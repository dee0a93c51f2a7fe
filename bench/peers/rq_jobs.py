"""RQ side of the redis section: the two job functions, found by the worker as ``rq_jobs.noop``
and ``rq_jobs.latency``.

Runs in the peers' virtualenv only. The no-op appends one byte to the O_APPEND file named by
``BENCH_MARKER`` (workers only), the latency job one 16-byte record (ms from enqueue to
start), exactly like AsyncTask's ``bench/core/noop_jobs.py``. RQ's default worker imports this
module (and with it ``marker``) in each job's forked work horse (its parent never runs a job),
so there the file is opened once per job: part of what that worker costs.
"""

from __future__ import annotations

import os
import time

import marker  # type: ignore[import-not-found]  # beside this file, on PYTHONPATH


# Defined here, not taken from marker: RQ names a job by its function's module.
def noop() -> None:
    os.write(marker.FD, b".")


def latency(sent: float) -> None:
    os.write(marker.FD, b"%15.6f\n" % ((time.time() - sent) * 1000))
