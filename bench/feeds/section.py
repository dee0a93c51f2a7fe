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
UNFED = "unfed"
FED = "fed"
#: Items of the small task whose creation's peak RSS the large one's is compared with.
SMALL_TASK = 10_000


@dataclass
class FeedRun(DrainRates):
    case: str
    backend: str
    processes: int
    concurrency: int
    jobs: int
    parallel: int | None
    create_s: float = 0.0
    create_peak_rss_kb: int = 0
    startup_s: float = 0.0
    steady_s: float = 0.0
    total_s: float = 0.0
    worker_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0
    progress: list[tuple[float, int]] = field(default_factory=list)
    load_before: float = 0.0
    checks: dict[str, int] = field(default_factory=dict)
    error: str = ""

    def tenth_rate(self, last: bool) -> float:
        return tenth_rate(self, last)


@dataclass
class FeedResults(SectionResults[FeedRun]):
    #: Peak RSS of the process creating the small task, by backend.
    small_peak_rss_kb: dict[str, int] = field(default_factory=dict)


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> FeedResults:
    results = FeedResults(settings)
    with section_frame(results) as stack:
        # Tracking needs SQL even on Redis: the PostgreSQL database is opened for both.
        brokers = open_brokers(results, pg_url, server, stack, "feeds", [*settings["backends"], POSTGRESQL])
        tracking_db = next((b for b in brokers if b.backend == POSTGRESQL), None)
        if tracking_db is None:
            results.failures.append("the feeds section needs PostgreSQL (its tracking database)")
            return results
        shown = [b for b in brokers if b.backend in settings["backends"]]
        for broker in shown:
            _small_task(results, broker, tracking_db, workdir)
        for rep in range(settings["reps"]):
            for broker in shown:
                cases = [UNFED, FED] if rep % 2 == 0 else [FED, UNFED]
                for case in cases:
                    _one(results, broker, tracking_db, case, rep, workdir)
    return results


def _small_task(results: FeedResults, broker: BenchBroker, tracking_db: BenchBroker, workdir: Path) -> None:
    try:
        _empty(broker, tracking_db)
        created = _create(broker, tracking_db, SMALL_TASK, results.settings["parallel"], workdir)
        results.small_peak_rss_kb[broker.backend] = int(created["peak_rss_kb"])
    except (RuntimeError, OSError, subprocess.SubprocessError, psycopg.Error, redis.RedisError) as exc:
        results.failures.append(f"small task on {broker.backend}: {' '.join(str(exc).split())[:600]}")


def _one(
    results: FeedResults, broker: BenchBroker, tracking_db: BenchBroker, case: str, rep: int, workdir: Path
) -> None:
    s = results.settings
    parallel = s["parallel"] if case == FED else None
    one = FeedRun(case, broker.backend, s["processes"], s["concurrency"], s["items"], parallel)
    label = f"feeds-{broker.backend}-{case}-r{rep}"
    marker = workdir / f"{label}.marker"
    marker.write_bytes(b"")
    try:
        _empty(broker, tracking_db)
        created = _create(broker, tracking_db, one.jobs, parallel, workdir)
        one.create_s, one.create_peak_rss_kb = float(created["seconds"]), int(created["peak_rss_kb"])
        if int(created["total"]) != one.jobs:
            raise RuntimeError(f"the task has {created['total']} jobs, expected {one.jobs}")
        one.load_before = os.getloadavg()[0]
        watch(one, broker, JOBS_MODULE, marker, workdir / f"{label}.log")
        one.checks = {"marker_bytes": marker.stat().st_size, "queued_left": broker.queued("default")}
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


def _create(
    broker: BenchBroker, tracking_db: BenchBroker, items: int, parallel: int | None, workdir: Path
) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "bench.feeds.create", "--broker", broker.url,
        "--database", tracking_db.url, "--items", str(items),
    ]  # fmt: skip
    if parallel is not None:
        argv += ["--parallel", str(parallel)]
    env = clean_env(PYTHONPATH=str(ROOT))
    timeout = max(600, items / 500)
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"creating the task failed: {out.stderr.strip()[-800:]}")
    created: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return created


def _say(rep: int, reps: int, one: FeedRun) -> None:
    workers = f"{one.processes} proc x {one.concurrency}"
    label = f"rep {rep + 1}/{reps} feeds {one.case} on {one.backend}, {workers}"
    if one.error:
        print(f"{label}: FAILED: {one.error[-300:]}", file=sys.stderr)
        return
    print(
        f"{label}: {one.jobs:,} jobs created in {one.create_s:.1f} s, drained at {one.steady_rate:,.0f}/s",
        file=sys.stderr,
    )
