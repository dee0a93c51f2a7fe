"""The AsyncTask jobs of the bench: a no-op apart from one completion marker, and its latency twin.

Each no-op run appends one byte to the O_APPEND file named by ``BENCH_MARKER``, the same single
``write(2)`` that the Ruby worker does, so the bench can count finished jobs from the file's
size without asking Redis (which would add commands to what is being measured).

Loaded by the worker as ``-r bench/core/noop_jobs.py`` and imported by the enqueuer as
``bench.core.noop_jobs``; the file is opened only where the variable is set (in workers).

The latency job takes its enqueue time (``time.time()`` in the enqueuer) and appends one
16-byte record instead, the milliseconds from enqueue to start, the same record as the
Ruby ``LatencyWorker``'s.
"""

from __future__ import annotations

import os
import time

from asynctask import job

#: Registered name: the Sidekiq ``class`` string written into each payload.
NAME = "NoopJob"
LATENCY_NAME = "LatencyJob"

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


@job(name=NAME)
def noop_job() -> None:
    os.write(_marker, b".")


@job(name=LATENCY_NAME)
def latency_job(sent: float) -> None:
    os.write(_marker, b"%15.6f\n" % ((time.time() - sent) * 1000))
