"""The jobs of the flow section: bench/core/noop_jobs.py's no-op (one byte appended to the
``BENCH_MARKER`` file), with and without a concurrency key, so that a keyed and a plain drain
differ only by the key.

Loaded by the workers as ``-r bench/flow/jobs.py`` and imported by the bench to push; the
marker is opened only where the variable is set (in workers).
"""

from __future__ import annotations

import os

from asynctask import job

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1

#: The queue of the parked jobs, which no worker of the bench reads.
PARKED_QUEUE = "parked"


@job(name="FlowPlainJob")
def flow_plain(key: str) -> None:
    """No key: ``key`` is only there to give both jobs the same arguments."""
    os.write(_marker, b".")


@job(name="FlowKeyedJob", concurrency_key="{key}")
def flow_keyed(key: str) -> None:
    """One job of the line of ``key``, at limit 1."""
    os.write(_marker, b".")


@job(name="FlowParkedJob", queue=PARKED_QUEUE, concurrency_key="parked:{key}")
def flow_parked(key: str) -> None:
    """Never runs: the first job of each key holds its slot in a queue no worker reads, so
    the key's other jobs stay waiting in its line for the whole run."""
    os.write(_marker, b".")
