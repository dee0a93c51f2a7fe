"""Jobs of the chaos suite's worker subprocesses (``asynctask worker -r tests/chaos/chaos_jobs.py``).

Every run appends ``<event> <jid> <pid> <parent pid> <epoch time>`` to the file named by
ASYNCTASK_TEST_RUNS: the process the test started is the parent when it supervises the
worker in a child, the process itself when it does not. The file is opened with O_APPEND
and each line is one ``write`` of a few dozen bytes, which Linux appends whole, so the lines
of concurrent processes never interleave. The file is outside every broker, so it is the
truth about what ran while brokers come and go.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import asynctask

_runs = os.open(os.environ["ASYNCTASK_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _note(event: str) -> None:
    jid = asynctask.current_job().jid
    os.write(_runs, f"{event} {jid} {os.getpid()} {os.getppid()} {time.time()!r}\n".encode())


@asynctask.job
def chaos_drain(pause_ms: int) -> None:
    """Work up to ``pause_ms`` milliseconds (so that a drain spans the faults), then record the run."""
    if pause_ms:
        time.sleep(random.random() * pause_ms / 1000)
    _note("done")


@asynctask.job(retry=3)
def chaos_flaky() -> None:
    """Fail on the first attempt, succeed on the retry: only the poller can bring it back."""
    if asynctask.current_job().retry_count is None:
        _note("failed")
        raise RuntimeError("the first attempt fails on purpose")
    _note("done")


@chaos_flaky.retry_in
def _soon(count: int, exc: BaseException, job: dict[str, Any]) -> float:
    # The runtime adds Sidekiq's jitter (up to 9 s on the first retry) to this.
    return 0.1


@asynctask.job
def chaos_fed(chunk: list[int]) -> None:
    """A fed task's job: its chunk's one item is ``pause_ms``, as for ``chaos_drain``."""
    if chunk[0]:
        time.sleep(random.random() * chunk[0] / 1000)
    _note("done")


@asynctask.job(retry=False)
def chaos_item(chunk: list[int]) -> None:
    """A tracked task's job: its one item is ``pause_ms`` as for ``chaos_drain``; a negative
    item fails (``JobFailed``), so that its task does not succeed. Its start is recorded too:
    a task that waits for another must start none before the other's jobs all ran."""
    _note("start")
    if chunk[0] < 0:
        _note("failed")
        raise asynctask.JobFailed("a negative item")
    time.sleep(random.random() * chunk[0] / 1000)
    _note("done")


@asynctask.job(retry=False)
def chaos_adder(chunk: list[list[int]]) -> None:
    """The first job of a task of unknown size: it adds ``chunk[0]`` jobs of ``chaos_item`` (of
    ``chunk[1]`` ms each) to its task. Run again after a kill, it adds nothing twice."""
    _note("start")
    count, pause_ms = chunk[0]
    asynctask.current_job().task.add([pause_ms] * count, job=chaos_item)
    _note("done")


def _note_task(event: str, summary: dict[str, Any]) -> None:
    """A callback's run, by its task's id (where other runs have their jid), when it starts."""
    line = f"{event} {summary['task_id']} {os.getpid()} {os.getppid()} {time.time()!r}\n"
    os.write(_runs, line.encode())


@asynctask.job
def chaos_on_complete(summary: dict[str, Any]) -> None:
    _note_task("complete", summary)


@asynctask.job
def chaos_on_success(summary: dict[str, Any]) -> None:
    _note_task("success", summary)
