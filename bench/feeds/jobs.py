"""The job of the feeds and fair share sections: bench/core/noop_jobs.py's no-op (one byte
appended to the ``BENCH_MARKER`` file), taking a task's chunk as its one argument.

Loaded by the workers as ``-r bench/feeds/jobs.py`` and by the creating processes
(bench/feeds/create.py, bench/fair/create.py) for the definition; the marker is opened only where
the variable is set.
"""

from __future__ import annotations

import os
from typing import Any

from asynctask import job

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


@job(name="FeedNoopJob")
def feed_noop(chunk: list[Any]) -> None:
    os.write(_marker, b".")
