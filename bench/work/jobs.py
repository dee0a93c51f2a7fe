"""The jobs of ``python -m bench.work``: a no-op apart from one byte appended to the
``BENCH_MARKER`` file, plain, with a concurrency key, and on a FIFO queue. Loaded by the workers
as ``-r bench.work.jobs`` and imported by the scenarios to push; public API only."""

from __future__ import annotations

import os
from typing import Any

from asynctask import job

#: The queue the FIFO scenario's worker reads in push order rather than in turn by tenant.
FIFO_QUEUE = "fifo"

_path = os.environ.get("BENCH_MARKER")
# Opened once at import: a per-job open/close would cost more than the job itself.
_marker = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


@job(name="WorkPlainJob")
def plain(number: int) -> None:
    os.write(_marker, b".")


@job(name="WorkKeyedJob", concurrency_key="{key}")
def keyed(key: str) -> None:
    os.write(_marker, b".")


@job(name="WorkItemJob")
def item(chunk: list[Any]) -> None:
    os.write(_marker, b".")


@job(name="WorkFifoItemJob", queue=FIFO_QUEUE)
def fifo_item(chunk: list[Any]) -> None:
    os.write(_marker, b".")
