"""Jobs for the watchdog's and recycling's tests (``asynctask worker -r tests/jobs/watchdog_jobs.py``).

They record what they do as lines ``<event> <jid> <image> <epoch time>`` in the file named by
ASYNCTASK_TEST_RUNS (as tests/jobs/broker_jobs.py does, in the place of its pid): ``image`` is a
number drawn when the worker's interpreter loads this module, so that a test can tell apart the
interpreters of a worker that replaced itself, all under one pid.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import time

import asynctask

_runs = os.open(os.environ["ASYNCTASK_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
#: This interpreter's number.
_image = int.from_bytes(os.urandom(6), "big")
#: What ``leak`` keeps alive for good.
_leaked: list[bytearray] = []


def _note(event: str) -> None:
    os.write(_runs, f"{event} {asynctask.current_job().jid} {_image} {time.time()!r}\n".encode())


@asynctask.job
def record() -> None:
    _note("done")


@asynctask.job
async def record_async() -> None:
    await asyncio.sleep(0)
    _note("done")


@asynctask.job
def hold_gil(seconds: int) -> None:
    """Block ``seconds`` in one C call that keeps the GIL: no other thread of the process (signal
    handlers, heartbeat) runs meanwhile. libc's system() waits for its ``sleep`` through
    signals, and PyDLL does not release the GIL around the call, as a long C extension call
    or a huge big-integer operation would not."""
    _note("start")
    ctypes.PyDLL(None).system(f"sleep {int(seconds)}".encode())
    _note("done")


@asynctask.job
def leak(megabytes: int) -> None:
    """Keep ``megabytes`` of touched memory for the rest of the process's life."""
    _leaked.append(bytearray(b"\x01") * (megabytes << 20))
    _note("done")


@asynctask.job
def stop_own_process() -> None:
    """Send TERM to the worker process running it, as an operator would."""
    os.kill(os.getpid(), signal.SIGTERM)
    _note("done")


@asynctask.job
def allocate() -> None:
    """Hold a block from malloc (not Python's small-object allocator) for a moment, as most jobs do."""
    block = bytearray(1 << 17)
    time.sleep(0.01)
    del block
    _note("done")


@asynctask.job
def print_malloc_arenas() -> None:
    """glibc's malloc_stats(): one ``Arena N:`` section per malloc arena, on the worker's stderr."""
    ctypes.CDLL(None).malloc_stats()
    _note("done")
