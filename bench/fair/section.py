"""The fair share section: what serving a queue in turn by share costs its drain.

For each broker (Redis, PostgreSQL) and repetition, four drains of N no-op jobs (bench/fair/
jobs.py, chunks of one), each from an empty broker and tracking database:

- ``fifo-1`` and ``fair-1``: one task of N jobs, without a tenant;
- ``fifo-T`` and ``fair-T`` (T = 100 by default): T tasks of N/T jobs, each of its own tenant,
  so that a fair queue has T shares to serve in turn.

The ``fifo`` drains run their workers with ``ASYNCTASK_FIFO_QUEUES=default``, so the queue
is served in push order; the ``fair`` ones leave the queue fair, the default. The order of
the four alternates between repetitions. The tasks are created before the workers start, in a
process of their own (bench/fair/create.py), so that the drain measures fetching and
dispatching alone; it is timed from outside as in the feeds section, with a progress sample
every 0.1 s. Afterwards the marker must hold N bytes and the queue be empty.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.drain import (
    QUEUE,
    BenchBroker,
    DrainRun,
    create_in_process,
    drain_once,
    empty_with_tracking,
    open_with_tracking,
    say,
)
from bench.core.redis_server import RedisServer
from bench.core.results import SectionResults, section_frame

JOBS_MODULE = "bench/feeds/jobs.py"
FIFO = "fifo"
FAIR = "fair"


def case_name(mode: str, tasks: int) -> str:
    return f"{mode}-{tasks}"


def cases(many: int) -> list[tuple[str, int]]:
    """(mode, tasks) of a repetition's drains, in the order of an even repetition."""
    return [(FIFO, 1), (FAIR, 1), (FIFO, many), (FAIR, many)]


def order(many: int, rep: int) -> list[tuple[str, int]]:
    """The drains of repetition ``rep``: reversed every other one, so that a drift of the
    machine's load over a repetition falls on fifo and fair alike."""
    drains = cases(many)
    return drains if rep % 2 == 0 else drains[::-1]


@dataclass
class FairRun(DrainRun):
    mode: str
    backend: str
    tasks: int
    processes: int
    concurrency: int
    jobs: int
    create_s: float = 0.0

    @property
    def case(self) -> str:
        return case_name(self.mode, self.tasks)


@dataclass
class FairResults(SectionResults[FairRun]):
    """The fair-share section's results."""


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> FairResults:
    results = FairResults(settings)
    with section_frame(results) as stack:
        opened = open_with_tracking(results, pg_url, server, stack, "fair", settings["backends"])
        if opened is None:
            return results
        brokers, tracking_db = opened
        for rep in range(settings["reps"]):
            for broker in brokers:
                for mode, tasks in order(settings["tasks"], rep):
                    _one(results, broker, tracking_db, mode, tasks, rep, workdir)
    return results


def _one(
    results: FairResults,
    broker: BenchBroker,
    tracking_db: BenchBroker,
    mode: str,
    tasks: int,
    rep: int,
    workdir: Path,
) -> None:
    s = results.settings
    one = FairRun(mode, broker.backend, tasks, s["processes"], s["concurrency"], s["jobs"])
    # Only the fifo drains name the queue: a fair queue is the default.
    fifo = {"ASYNCTASK_FIFO_QUEUES": QUEUE} if mode == FIFO else {}

    def create() -> None:
        empty_with_tracking(broker, tracking_db)
        created = create_in_process(
            "bench.fair.create", broker, tracking_db, one.jobs, "--jobs", str(one.jobs), "--tasks", str(tasks)
        )
        one.create_s = float(created["seconds"])
        if int(created["total"]) != one.jobs:
            raise RuntimeError(f"the tasks have {created['total']} jobs, expected {one.jobs}")

    label = f"fair-{broker.backend}-{one.case}-r{rep}"
    drain_once(one, broker, JOBS_MODULE, label, workdir, create, **fifo)
    results.runs.append((rep, one))
    _say(rep, s["reps"], one)


def _say(rep: int, reps: int, one: FairRun) -> None:
    workers = f"{one.processes} proc x {one.concurrency}"
    say(
        f"rep {rep + 1}/{reps} fair {one.case} on {one.backend}, {workers}",
        one.error,
        f"{one.jobs:,} jobs in {one.tasks} task(s) created in {one.create_s:.1f} s, "
        f"drained at {one.steady_rate:,.0f}/s",
    )
