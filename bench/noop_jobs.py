"""The AsyncTask job of the bench: a no-op apart from one completion marker.

Each run appends one byte to the O_APPEND file named by ``BENCH_MARKER``, the same single
``write(2)`` that the Ruby worker does, so the bench can count finished jobs from the file's
size without asking Redis (which would add commands to what is being measured).

Loaded by the worker as ``-r bench/noop_jobs.py`` and imported by the enqueuer as
``bench.noop_jobs``; the file is opened only where the variable is set (in workers).
"""

from __future__ import annotations

import os

from asynctask import job

#: Registered name: the Sidekiq ``class`` string written into each payload.
NAME = "NoopJob"

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


@job(name=NAME)
def noop_job() -> None:
    os.write(_marker, b".")
