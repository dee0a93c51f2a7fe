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

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench.core.drain import POSTGRESQL, BenchBroker, open_brokers, tenth_rate, watch
from bench.core.redis_server import RedisServer
from bench.core.results import SectionResults, section_frame
from bench.core.system import ROOT, clean_env
from bench.core.timing import DrainRates

JOBS_MODULE = "bench/feeds/jobs.py"
FIFO = "fifo"
FAIR = "fair"
QUEUE = "default"


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
class FairRun(DrainRates):
    mode: str
    backend: str
    tasks: int
    processes: int
    concurrency: int
    jobs: int
    create_s: float = 0.0
    startup_s: float = 0.0
    steady_s: float = 0.0
    total_s: float = 0.0
    worker_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0
    progress: list[tuple[float, int]] = field(default_factory=list)
    load_before: float = 0.0
    checks: dict[str, int] = field(default_factory=dict)
    error: str = ""

    @property
    def case(self) -> str:
        return case_name(self.mode, self.tasks)

    def tenth_rate(self, last: bool) -> float:
        return tenth_rate(self, last)


@dataclass
class FairResults(SectionResults[FairRun]):
    """The fair-share section's results."""


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> FairResults:
    results = FairResults(settings)
    with section_frame(results) as stack:
        # create_task needs SQL even on Redis: the PostgreSQL database is opened for both.
        brokers = open_brokers(results, pg_url, server, stack, "fair", [*settings["backends"], POSTGRESQL])
        tracking_db = next((b for b in brokers if b.backend == POSTGRESQL), None)
        if tracking_db is None:
            results.failures.append("the fair section needs PostgreSQL (its tracking database)")
            return results
        shown = [b for b in brokers if b.backend in settings["backends"]]
        for rep in range(settings["reps"]):
            for broker in shown:
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
    label = f"fair-{broker.backend}-{one.case}-r{rep}"
    marker = workdir / f"{label}.marker"
    marker.write_bytes(b"")
    # Only the fifo drains name the queue: a fair queue is the default.
    fifo = {"ASYNCTASK_FIFO_QUEUES": QUEUE} if mode == FIFO else {}
    try:
        _empty(broker, tracking_db)
        created = _create(broker, tracking_db, one.jobs, tasks)
        one.create_s = float(created["seconds"])
        if int(created["total"]) != one.jobs:
            raise RuntimeError(f"the tasks have {created['total']} jobs, expected {one.jobs}")
        one.load_before = os.getloadavg()[0]
        watch(one, broker, JOBS_MODULE, marker, workdir / f"{label}.log", **fifo)
        one.checks = {"marker_bytes": marker.stat().st_size, "queued_left": broker.queued(QUEUE)}
    except (RuntimeError, OSError, subprocess.SubprocessError, psycopg.Error, redis.RedisError) as exc:
        one.error = one.error or " ".join(str(exc).split())[:1500]
    if not one.error and one.checks["marker_bytes"] != one.jobs:
        one.error = f"{one.checks['marker_bytes']} jobs ran, expected {one.jobs}"
    if not one.error and one.checks["queued_left"]:
        one.error = f"{one.checks['queued_left']} jobs left in the queue"
    results.runs.append((rep, one))
    _say(rep, s["reps"], one)


def _empty(broker: BenchBroker, tracking_db: BenchBroker) -> None:
    broker.empty()
    if tracking_db is not broker:
        tracking_db.empty()


def _create(broker: BenchBroker, tracking_db: BenchBroker, jobs: int, tasks: int) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "bench.fair.create", "--broker", broker.url,
        "--database", tracking_db.url, "--jobs", str(jobs), "--tasks", str(tasks),
    ]  # fmt: skip
    env = clean_env(PYTHONPATH=str(ROOT))
    timeout = max(600, jobs / 500)
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"creating the tasks failed: {out.stderr.strip()[-800:]}")
    created: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return created


def _say(rep: int, reps: int, one: FairRun) -> None:
    workers = f"{one.processes} proc x {one.concurrency}"
    label = f"rep {rep + 1}/{reps} fair {one.case} on {one.backend}, {workers}"
    if one.error:
        print(f"{label}: FAILED: {one.error[-300:]}", file=sys.stderr)
        return
    print(
        f"{label}: {one.jobs:,} jobs in {one.tasks} task(s) created in {one.create_s:.1f} s, "
        f"drained at {one.steady_rate:,.0f}/s",
        file=sys.stderr,
    )
