"""The jobs of the resumable section, and the server middleware that times them.

Both jobs run the same generator, ``_indexes``: ``resumable_noop`` is that generator itself,
registered as a resumable job (the runtime drives it in batches, with its checkpoints), and
``plain_noop`` loops over it in plain Python. Their run times differ by what the resumable
runtime adds, and nothing else.

Loaded by the worker as ``-r bench/resumable/jobs.py`` and imported by the bench to push. Where
``BENCH_RESUMABLE_TIMES`` is set (in the worker), the module adds ``time_run`` to the server
chain: each job appends one JSON line to that file with the wall time of its whole middleware
invocation, so the time to push and to fetch the job is left out but the runtime's own work
(loading the checkpoint, the batches, any checkpoint stored) is in.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from asynctask import current_job, job, server_chain
from asynctask.job import JobDefinition
from asynctask.payload import JobDict

PLAIN_NAME = "ResumableBenchPlainJob"
RESUMABLE_NAME = "ResumableBenchResumableJob"

_path = os.environ.get("BENCH_RESUMABLE_TIMES")
# Opened once at import, so that no job pays for an open.
_times = os.open(_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _path else -1


def _indexes(n: int, cursor: int | None = None) -> Iterator[int]:
    """Every index after ``cursor`` (from 0 when None) below ``n``: the loop both jobs run."""
    # A loop body, not ``yield from range(...)``: a job's work goes between the index and its yield.
    for i in range(0 if cursor is None else cursor + 1, n):  # noqa: UP028
        yield i


# The generator itself, not a wrapper that delegates to it: ``yield from`` would add a frame
# switch per iteration that the plain job does not pay, and the ratio would count it.
resumable_noop = job(name=RESUMABLE_NAME)(_indexes)


@job(name=PLAIN_NAME)
def plain_noop(n: int) -> None:
    for _ in _indexes(n, None):
        pass


def time_run(definition: JobDefinition[Any], job: JobDict, queue: str, call_next: Callable[[], Any]) -> Any:
    """Append ``{"class", "seconds", "cursor", "error"}`` for the job to the times file;
    ``cursor`` is the last checkpoint the runtime saw a resumable job yield (None for a plain one)."""
    error = ""
    started = time.perf_counter()
    try:
        return call_next()
    except BaseException as exc:
        # Written too, so that the bench fails at once rather than waiting for a retry.
        error = repr(exc)
        raise
    finally:
        seconds = time.perf_counter() - started
        iteration = current_job().iteration
        line = {
            "class": job["class"],
            "seconds": seconds,
            "cursor": iteration.cursor if iteration is not None else None,
            "error": error,
        }
        os.write(_times, (json.dumps(line) + "\n").encode())


if _path:
    # The innermost middleware: the tracking middleware (a no-op here, tracking is off) is outside.
    server_chain.add(time_run)
