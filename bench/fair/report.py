"""The fair share section of RESULTS.md and stdout, and ``fair.json``.

Medians of the repetitions with (min-max); the fair ÷ fifo ratio is taken per repetition
between the two drains of the same broker and number of tasks.
"""

from __future__ import annotations

from bench.core.fmt import fixed, spread, table
from bench.core.report import (
    BACKEND_NAMES,
    CPU_METHOD,
    STEADY_COLUMNS,
    DrainReport,
    at_least,
    case_runs,
    per_backend,
    per_rep,
    steady_cells,
)
from bench.fair.section import FAIR, FIFO, FairResults, case_name, cases

#: Target: a fair queue drains at no less than this share of the same queue served in push order.
FAIR_FLOOR = 0.90


def paired(results: FairResults, backend: str, tasks: int) -> list[float]:
    """fair ÷ fifo drain jobs/s of each repetition that has both drains."""
    fair, fifo = case_name(FAIR, tasks), case_name(FIFO, tasks)
    return per_rep(results, backend, fair, fifo, lambda ours, base: ours.steady_rate / base.steady_rate)


def throughput_table(results: FairResults) -> list[str]:
    header = ["backend", "case", "tasks", "jobs", "worker processes x job slots", "create s", *STEADY_COLUMNS]
    names = [case_name(mode, tasks) for mode, tasks in cases(results.settings["tasks"])]
    rows = []
    for backend, runs in case_runs(results, names):
        first = runs[0]
        rows.append(
            [
                BACKEND_NAMES[backend],
                first.case,
                f"{first.tasks}, a tenant each" if first.tasks > 1 else "1, no tenant",
                f"{first.jobs:,}",
                f"{first.processes} x {first.concurrency}",
                spread((r.create_s for r in runs), fixed(1)),
                *steady_cells(backend, runs),
            ]
        )
    return table(header, rows)


def _goals(results: FairResults, backend: str) -> list[str]:
    many = results.settings["tasks"]
    what = f"{BACKEND_NAMES[backend]}: drain jobs/s, fair ÷ fifo queue"
    return [
        *at_least(f"{what}, one task", FAIR_FLOOR, paired(results, backend, 1)),
        *at_least(f"{what}, {many} tasks, a tenant each", FAIR_FLOOR, paired(results, backend, many)),
    ]


INTRO = (
    "{jobs:,} no-op chunk jobs per drain{quick_sizes}, in 1 or {tasks} tasks created before "
    "the workers start; {reps} rep(s), the four drains of a broker interleaved; median (min-max)."
)


METHOD = (
    """\
- **Job** (`bench/feeds/jobs.py`, shared with the feeds section): the no-op of the other
  sections (one byte appended to an O_APPEND marker file), taking the task's chunk (one item)
  as its argument.
- **Creation**: in a process of its own (`python -m bench.fair.create`), before the workers
  start: for the `-1` cases `create_task(FeedNoopJob, range(N))` (chunks of one, no tenant: the
  task is a share of its own); for the `-T` cases T such tasks of N/T items one after the other,
  task i with `tenant="t<i>"`, so that in push order each task's jobs come before the next
  one's. The tracking database is the section's private PostgreSQL database on both brokers.
- **Queue**: the `fifo` drains start their workers with `ASYNCTASK_FIFO_QUEUES=default`
  (the queue served in push order); the `fair` drains leave the queue fair, the default.
- **Drain**: the worker processes (`python -m asynctask worker --broker URL -r
  bench/feeds/jobs.py -c C -q default`, tracking off) are spawned together after the creation
  and the marker's size is polled every 2 ms. *steady* = first job done -> last job done.
  Afterwards the marker holds exactly N bytes and the queue is empty.
- **Order**: per broker and repetition, fifo-1, fair-1, fifo-T, fair-T, reversed every other
  repetition; each drain starts from an empty broker and tracking database. The fair ÷ fifo
  ratio is taken per repetition.
- **Tenths**: the marker's size is sampled every 0.1 s; the rate over the first tenth of the
  jobs ÷ the rate over the last tenth shows whether the rate holds over the drain (a fair
  queue of T equal tasks serves all T shares until its last jobs).
"""
    + CPU_METHOD
)


REPORT = DrainReport[FairResults](
    "Fair share",
    "fair share",
    "fair.json",
    METHOD,
    INTRO,
    throughput_table,
    per_backend(_goals),
    derived=lambda r: {"case": r.case, "steady_rate": r.steady_rate},
)
target_rows = REPORT.judged_rows
