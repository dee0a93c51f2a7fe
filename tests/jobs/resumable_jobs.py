"""Resumable jobs for the worker subprocesses of tests/brokers/resumable/test_shared.py.

``count`` (and ``count_async``, the same as an async generator) records each iteration as a
line ``<jid> <index> <pid>`` in the file named by ASYNCTASK_TEST_ITERATIONS (one O_APPEND
write per line: lines of concurrent processes never interleave), so a test can tell which
iterations ran, how often, and in which process.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator

import asynctask

_iterations = os.open(os.environ["ASYNCTASK_TEST_ITERATIONS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


@asynctask.job
def count(total: int, pause_ms: int, cursor: int | None = None) -> Iterator[int]:
    """Iterations 0 to total - 1, ``pause_ms`` each; the cursor is the last one done."""
    jid = asynctask.current_job().jid
    for index in range(0 if cursor is None else cursor + 1, total):
        time.sleep(pause_ms / 1000)
        os.write(_iterations, f"{jid} {index} {os.getpid()}\n".encode())
        yield index


@asynctask.job
async def count_async(total: int, pause_ms: int, cursor: int | None = None) -> AsyncIterator[int]:
    """``count``, awaiting its pauses on the worker's event loop."""
    jid = asynctask.current_job().jid
    for index in range(0 if cursor is None else cursor + 1, total):
        await asyncio.sleep(pause_ms / 1000)
        os.write(_iterations, f"{jid} {index} {os.getpid()}\n".encode())
        yield index
