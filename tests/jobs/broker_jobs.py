"""Jobs for the broker suite's worker subprocesses (``asynctask worker -r tests/jobs/broker_jobs.py``).

They record what they do as lines ``<event> <jid> <pid> <epoch time>`` in the file named by
ASYNCTASK_TEST_RUNS, whatever the broker, so a test can tell which process ran which job and
how often. The pid is the ``asynctask worker`` process the test started, which runs the jobs
itself. The file is opened with O_APPEND and each
line goes out in one ``write`` of a few dozen bytes: Linux appends it whole, so lines of
concurrent processes never interleave.
"""

from __future__ import annotations

import os
import random
import time

import asynctask

_runs = os.open(os.environ["ASYNCTASK_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _note(event: str) -> None:
    os.write(_runs, f"{event} {asynctask.current_job().jid} {os.getpid()} {time.time()!r}\n".encode())


@asynctask.job
def record(pause_ms: int) -> None:
    """Pause up to ``pause_ms`` milliseconds, then record that this job ran."""
    if pause_ms:
        time.sleep(random.random() * pause_ms / 1000)
    _note("done")


@asynctask.job
def record_slowly(seconds: float) -> None:
    """Record the start, work ``seconds``, record the end: a crash in between leaves a start alone."""
    _note("start")
    time.sleep(seconds)
    _note("done")
