"""Jobs for the CPU placement's tests (``asynctask worker -r tests/jobs/placement_jobs.py``): each
records ``done <jid> <pid> <epoch time>`` in the file named by ASYNCTASK_TEST_RUNS, as
tests/jobs/broker_jobs.py does."""

from __future__ import annotations

import asyncio
import os
import time

import asynctask

_runs = os.open(os.environ["ASYNCTASK_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _note() -> None:
    os.write(_runs, f"done {asynctask.current_job().jid} {os.getpid()} {time.time()!r}\n".encode())


@asynctask.job
def record(pause_ms: int) -> None:
    """Pause ``pause_ms`` milliseconds, then record that this job ran."""
    if pause_ms:
        time.sleep(pause_ms / 1000)
    _note()


@asynctask.job
async def record_async() -> None:
    await asyncio.sleep(0)
    _note()
