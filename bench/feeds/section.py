"""The feeds section: what feeding a task costs its drain.

For each broker (Redis, PostgreSQL) and repetition, one task of N no-op items
(bench/feeds/jobs.py, chunks of one) is created, then drained by the workers, twice: unfed,
and fed at ``parallel`` (the order alternates between repetitions). Each creation runs in a
process of its own (bench/feeds/create.py), which reports its time and peak RSS: the RSS of
the N-item task is compared with that of a small task, to show that creation memory does not
grow with the task. The drains are timed from outside, as in the flow section, with a progress
sample every 0.1 s: the fed drain's rate over its first tenth of jobs (nearly N held) against
its last tenth (almost none held) shows whether a release costs more with more held jobs.

Every run starts from an empty broker and tracking database and checks after the drain that
the marker holds N bytes and that the queue is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.core.drain import (
    RUN_ERRORS,
    BenchBroker,
    DrainRun,
    create_in_process,
    drain_once,
    empty_with_tracking,
    one_line,
    open_with_tracking,
    say,
)
from bench.core.redis_server import RedisServer
from bench.core.results import SectionResults, section_frame

JOBS_MODULE = "bench/feeds/jobs.py"
UNFED = "unfed"
FED = "fed"
#: Items of the small task whose creation's peak RSS the large one's is compared with.
SMALL_TASK = 10_000


@dataclass
class FeedRun(DrainRun):
    case: str
    backend: str
    processes: int
    concurrency: int
    jobs: int
    parallel: int | None
    create_s: float = 0.0
    create_peak_rss_kb: int = 0


@dataclass
class FeedResults(SectionResults[FeedRun]):
    #: Peak RSS of the process creating the small task, by backend.
    small_peak_rss_kb: dict[str, int] = field(default_factory=dict)


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> FeedResults:
    results = FeedResults(settings)
    with section_frame(results) as stack:
        opened = open_with_tracking(results, pg_url, server, stack, "feeds", settings["backends"])
        if opened is None:
            return results
        shown, tracking_db = opened
        for broker in shown:
            _small_task(results, broker, tracking_db)
        for rep in range(settings["reps"]):
            for broker in shown:
                cases = [UNFED, FED] if rep % 2 == 0 else [FED, UNFED]
                for case in cases:
                    _one(results, broker, tracking_db, case, rep, workdir)
    return results


def _small_task(results: FeedResults, broker: BenchBroker, tracking_db: BenchBroker) -> None:
    try:
        empty_with_tracking(broker, tracking_db)
        created = _create(broker, tracking_db, SMALL_TASK, results.settings["parallel"])
        results.small_peak_rss_kb[broker.backend] = int(created["peak_rss_kb"])
    except RUN_ERRORS as exc:
        results.failures.append(f"small task on {broker.backend}: {one_line(exc)[:600]}")


def _one(
    results: FeedResults, broker: BenchBroker, tracking_db: BenchBroker, case: str, rep: int, workdir: Path
) -> None:
    s = results.settings
    parallel = s["parallel"] if case == FED else None
    one = FeedRun(case, broker.backend, s["processes"], s["concurrency"], s["items"], parallel)

    def create() -> None:
        empty_with_tracking(broker, tracking_db)
        created = _create(broker, tracking_db, one.jobs, parallel)
        one.create_s, one.create_peak_rss_kb = float(created["seconds"]), int(created["peak_rss_kb"])
        if int(created["total"]) != one.jobs:
            raise RuntimeError(f"the task has {created['total']} jobs, expected {one.jobs}")

    drain_once(one, broker, JOBS_MODULE, f"feeds-{broker.backend}-{case}-r{rep}", workdir, create)
    results.runs.append((rep, one))
    _say(rep, s["reps"], one)


def _create(
    broker: BenchBroker, tracking_db: BenchBroker, items: int, parallel: int | None
) -> dict[str, Any]:
    fed = ["--parallel", str(parallel)] if parallel is not None else []
    return create_in_process("bench.feeds.create", broker, tracking_db, items, "--items", str(items), *fed)


def _say(rep: int, reps: int, one: FeedRun) -> None:
    workers = f"{one.processes} proc x {one.concurrency}"
    say(
        f"rep {rep + 1}/{reps} feeds {one.case} on {one.backend}, {workers}",
        one.error,
        f"{one.jobs:,} jobs created in {one.create_s:.1f} s, drained at {one.steady_rate:,.0f}/s",
    )
