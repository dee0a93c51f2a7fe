"""The job of the tracking section: a no-op taking one chunk, plus the completion marker.

``create_task`` gives each job its chunk (a list) as its one argument, so the no-op of
``noop_jobs`` (no arguments) cannot serve. Both the tracked and the untracked runs use this
job with the same argument shape, so that tracking is the only difference between them.
The marker is the same as in ``noop_jobs``: one ``write(2)`` of one byte per job.
"""

from __future__ import annotations

import os
from typing import Any

from asynctask import job

#: Registered name: the ``class`` string written into each payload.
NAME = "TrackedNoopJob"

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


@job(name=NAME)
def tracked_noop_job(chunk: list[Any]) -> None:
    os.write(_marker, b".")


#: Registered name of the callback some tracked drains give their task (``on_complete``).
CALLBACK_NAME = "TrackedNoopCallback"


@job(name=CALLBACK_NAME)
def tracked_noop_callback(summary: dict[str, Any]) -> None:
    """The task's callback: one marker byte more, once every job's is there."""
    os.write(_marker, b"!")
