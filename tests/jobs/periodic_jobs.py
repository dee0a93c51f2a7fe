"""Schedules every second, for the periodic tests' worker subprocesses: one per catch-up rule
(``latest``, ``all``, ``none``), all running the same job.

Each run records ``tick <schedule> <scheduled second> <jid> <pid> <epoch time>`` in the file
named by ASYNCTASK_TEST_RUNS (one ``write`` per line, O_APPEND: lines of processes never
interleave).
"""

from __future__ import annotations

import os
import time

import asynctask

_runs = os.open(os.environ["ASYNCTASK_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


@asynctask.job
def every_second() -> None:
    job = asynctask.current_job().job
    line = f"tick {job['periodic']} {job['periodic_at']} {job['jid']} {os.getpid()} {time.time()!r}\n"
    os.write(_runs, line.encode())


asynctask.periodic(every_second, cron="* * * * * *", name="latest", catch_up="latest")
asynctask.periodic(every_second, cron="* * * * * *", name="all", catch_up="all")
asynctask.periodic(every_second, cron="* * * * * *", name="none", catch_up="none")
