"""The job and the schedules of the periodic section: ``BENCH_PERIODIC_SCHEDULES`` schedules
(none when unset or 0: the baseline run) of one no-op job, every second, named ``every-second-0``,
``every-second-1``, ..., each pushing its jobs to ``BENCH_PERIODIC_QUEUE``.

Loaded by the workers as ``-r bench/periodic/jobs.py``; the bench's workers never serve that
queue, so their CPU goes to scheduling, not to running the jobs.
"""

from __future__ import annotations

import os

from asynctask import job, periodic

#: Six fields, the first one seconds: a tick every second.
EVERY_SECOND = "* * * * * *"
NAME_PREFIX = "every-second-"
DEFAULT_QUEUE = "periodic"


@job(name="PeriodicNoopJob")
def periodic_noop() -> None:
    """Never run in the bench (its queue has no worker); a job needs a body all the same."""


for _i in range(int(os.environ.get("BENCH_PERIODIC_SCHEDULES") or 0)):
    periodic(
        periodic_noop,
        cron=EVERY_SECOND,
        name=f"{NAME_PREFIX}{_i}",
        queue=os.environ.get("BENCH_PERIODIC_QUEUE") or DEFAULT_QUEUE,
    )
