"""A worker whose clock runs ASYNCTASK_TEST_CLOCK_SHIFT seconds fast: loaded with ``-r``, it moves
``time.time`` of the whole worker process ahead before the worker starts.

Each run records ``<label> <due time> <real time>`` in the file named by ASYNCTASK_TEST_RUNS;
the due time is the periodic tick's, or the one the test gave in the args.
"""

from __future__ import annotations

import os
import time

import asynctask

_real = time.time
_shift = float(os.environ["ASYNCTASK_TEST_CLOCK_SHIFT"])
time.time = lambda: _real() + _shift
_runs = os.open(os.environ["ASYNCTASK_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _record(label: str, due: float) -> None:
    os.write(_runs, f"{label} {due!r} {_real()!r}\n".encode())


@asynctask.job(queue="clock")
def due_at(label: str, due: float) -> None:
    _record(label, due)


@asynctask.job(queue="clock")
def ticking() -> None:
    _record("tick", float(asynctask.current_job().job["periodic_at"]))


asynctask.periodic(ticking, cron="* * * * * *", name="ticking", catch_up="none")
