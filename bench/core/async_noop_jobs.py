"""The bench's no-op and latency jobs as ``async def`` jobs, under the same names and with the
same markers as ``bench/core/noop_jobs.py``: a worker that loads this module awaits them on its
event loop. The enqueuer pushes by name, so it stays ``bench.core.noop_jobs``'s (not imported
here: its jobs would take the names)."""

from __future__ import annotations

import os
import time

from asynctask import job

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


@job(name="NoopJob")
async def noop_job() -> None:
    os.write(_marker, b".")


@job(name="LatencyJob")
async def latency_job(sent: float) -> None:
    os.write(_marker, b"%15.6f\n" % ((time.time() - sent) * 1000))
