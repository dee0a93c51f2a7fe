"""The marker file every peer's jobs write to, exactly like AsyncTask's ``bench/core/noop_jobs.py``:
the no-op appends one byte to the O_APPEND file named by ``BENCH_MARKER`` (workers only), the
latency job one 16-byte record (ms from enqueue to start), so all systems are timed the same way.

Dependency-free, so that every peer's venv imports it (``marker``, with ``bench/peers`` on the
path). Celery and Dramatiq register ``noop`` and ``latency`` as their tasks; the peers that name
a job by its function's module (Huey, RQ) or run coroutines (arq, procrastinate) write to ``FD``
from their own functions.
"""

from __future__ import annotations

import os
import time

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
FD = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


def noop() -> None:
    os.write(FD, b".")


def latency(sent: float) -> None:
    os.write(FD, b"%15.6f\n" % ((time.time() - sent) * 1000))
