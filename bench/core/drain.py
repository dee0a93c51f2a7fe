"""Draining a broker with worker processes, timed from outside: the brokers a section runs on
(the bench's private Redis, a private PostgreSQL database) and the watch of one drain through
the marker file the no-op jobs append to (first job done -> last job done)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
import psycopg
import redis
from sqlalchemy.exc import SQLAlchemyError

from bench.core import procs
from bench.core.postgres import postgres_unreachable, shown
from bench.core.redis_server import RedisServer
from bench.core.system import ROOT, asynctask_queued, clean_env
from bench.core.timing import STOP_GRACE, DrainRates, drain_timeout, poll_marker
from bench.sql import db as sql_db
from bench.sql.db import PostgresDatabase

REDIS = "redis"
POSTGRESQL = "postgresql"
#: Seconds between two progress samples of a drain (when the run keeps them).
PROGRESS_EVERY = 0.1
#: The queue every drain's jobs go to.
QUEUE = "default"
#: What preparing, watching or checking a drain may raise: the run records it as its error,
#: and the section goes on with its next run.
RUN_ERRORS = (
    RuntimeError,
    OSError,
    subprocess.SubprocessError,
    psycopg.Error,
    redis.RedisError,
    SQLAlchemyError,
)


@dataclass
class BenchBroker:
    """One backend's broker for a section's runs, and how to empty it."""

    backend: str
    url: str
    redis_server: RedisServer | None = None
    postgres: PostgresDatabase | None = None

    def empty(self) -> None:
        if self.redis_server is not None:
            with self.redis_server.client() as conn:
                conn.flushall()
        if self.postgres is not None:
            self.postgres.empty()

    def queued(self, queue: str) -> int:
        if self.redis_server is not None:
            with self.redis_server.client() as conn:
                return asynctask_queued(conn, queue)
        # A feed's held jobs are not in the queue (on Redis they wait in the feed's own list).
        held = "state <> 'held'"
        return int(
            sql_db.query(self.url, f"SELECT count(*) FROM asynctask_job WHERE queue = '{queue}' AND {held}")[
                0
            ][0]
        )


class SectionResults(Protocol):
    versions: dict[str, str]
    databases: dict[str, str]
    failures: list[str]


def open_brokers(
    results: SectionResults,
    pg_url: str,
    server: RedisServer,
    stack: ExitStack,
    label: str,
    wanted: list[str],
) -> list[BenchBroker]:
    """The brokers of ``wanted``: the private Redis, and a private PostgreSQL database named
    after ``label``, migrated, dropped when ``stack`` closes."""
    brokers = []
    if REDIS in wanted:
        brokers.append(BenchBroker(REDIS, server.url, redis_server=server))
        results.databases[REDIS] = "the bench's private redis-server, FLUSHALL before each run"
    if POSTGRESQL in wanted:
        unreachable = postgres_unreachable(pg_url)
        if unreachable is not None:
            results.databases[POSTGRESQL] = f"skipped: {unreachable}"
            print(f"PostgreSQL not reachable ({unreachable}): no PostgreSQL rows", file=sys.stderr)
            return brokers
        db = stack.enter_context(PostgresDatabase(pg_url, label))
        argv = [sys.executable, "-m", "asynctask", "db", "upgrade", "--database-url", db.url]
        out = subprocess.run(argv, env=clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            results.failures.append(f"asynctask db upgrade failed: {out.stderr.strip()[-600:]}")
            return brokers
        brokers.append(BenchBroker(POSTGRESQL, db.url, postgres=db))
        results.versions["PostgreSQL server"] = sql_db.postgres_version(pg_url)
        results.databases[POSTGRESQL] = (
            f"{shown(pg_url)}: a private database `{db.name}`, migrated once, TRUNCATEd before each run, "
            "dropped after"
        )
    return brokers


def open_with_tracking(
    results: SectionResults, pg_url: str, server: RedisServer, stack: ExitStack, label: str, wanted: list[str]
) -> tuple[list[BenchBroker], BenchBroker] | None:
    """The brokers of ``wanted``, and the PostgreSQL database that tracks their tasks (opened
    whether or not ``wanted`` names it); None, with the failure recorded, without PostgreSQL."""
    brokers = open_brokers(results, pg_url, server, stack, label, [*wanted, POSTGRESQL])
    tracking_db = next((b for b in brokers if b.backend == POSTGRESQL), None)
    if tracking_db is None:
        results.failures.append(f"the {label} section needs PostgreSQL (its tracking database)")
        return None
    return [b for b in brokers if b.backend in wanted], tracking_db


def empty_with_tracking(broker: BenchBroker, tracking_db: BenchBroker) -> None:
    broker.empty()
    if tracking_db is not broker:
        tracking_db.empty()


def create_in_process(
    module: str, broker: BenchBroker, tracking_db: BenchBroker, items: int, *args: str
) -> dict[str, Any]:
    """Run ``python -m module`` creating tasks of ``items`` jobs on ``broker``, tracked in
    ``tracking_db``, in a process of its own (so that its memory and time are its alone); what
    it printed last, as JSON."""
    argv = [sys.executable, "-m", module, "--broker", broker.url, "--database", tracking_db.url, *args]
    timeout = max(600, items / 500)
    out = subprocess.run(
        argv, env=clean_env(PYTHONPATH=str(ROOT)), cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if out.returncode != 0:
        raise RuntimeError(f"creating the tasks failed: {out.stderr.strip()[-800:]}")
    created: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return created


class Drain(Protocol):
    """What a section's run gives one drain (its size and workers), and where the watch
    writes what it measures: the phases, the CPU of the workers and of PostgreSQL (first job
    done -> last), and (seconds since the first job done, jobs done) every ``PROGRESS_EVERY``."""

    jobs: int
    processes: int
    concurrency: int
    startup_s: float
    steady_s: float
    total_s: float
    worker_cpu_s: float
    postgres_cpu_s: float
    progress: list[tuple[float, int]]


def watch(
    drain: Drain, broker: BenchBroker, jobs_module: str, marker: Path, log: Path, **settings: str
) -> None:
    """Spawn the workers, poll the marker until N bytes, fill in the timings and CPU; stop them.
    ``settings``: more environment variables for the workers (``ASYNCTASK_FIFO_QUEUES=...``)."""
    env = clean_env(PYTHONPATH=str(ROOT), ASYNCTASK_TRACKING="false", BENCH_MARKER=str(marker), **settings)
    argv = [
        sys.executable, "-m", "asynctask", "worker", "--broker", broker.url,
        "-r", jobs_module, "-c", str(drain.concurrency), "-q", "default",
    ]  # fmt: skip
    workers: list[subprocess.Popen[bytes]] = []
    spawned = time.monotonic()
    try:
        workers = [procs.spawn(argv, env=env, cwd=ROOT, log=log) for _ in range(drain.processes)]
        timeout = drain_timeout(drain.jobs)
        sampled = 0.0
        cpu_first, pg_first = 0.0, {}
        for poll in poll_marker(marker, drain.jobs):
            if poll.started:
                sampled = poll.now
                cpu_first, pg_first = _cpu(workers), postgres_cpu(broker.postgres)
            if poll.first and poll.now - sampled >= PROGRESS_EVERY:
                drain.progress.append((poll.now - poll.first, poll.done))
                sampled = poll.now
            if poll.last:
                drain.worker_cpu_s = _cpu(workers) - cpu_first
                pg_last = postgres_cpu(broker.postgres)
                drain.postgres_cpu_s = sum(cpu - pg_first.get(pid, 0.0) for pid, cpu in pg_last.items())
                first, now = poll.first, poll.now
                drain.startup_s, drain.steady_s, drain.total_s = first - spawned, now - first, now - spawned
                drain.progress.append((now - first, poll.done))
                return
            procs.check_workers(workers, log, poll.done, drain.jobs, poll.now - spawned, timeout)
    finally:
        procs.stop_all(workers, grace=STOP_GRACE)


class Progressed(Protocol):
    jobs: int
    progress: list[tuple[float, int]]


def tenth_rate(drain: Progressed, last: bool) -> float:
    """Jobs per second over the first (or last) tenth of the jobs, from the progress samples."""
    tenth = drain.jobs / 10
    low, high = (drain.jobs - tenth, drain.jobs) if last else (0.0, tenth)
    inside = [(at, done) for at, done in drain.progress if low <= done <= high]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return 0.0
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _cpu(workers: list[subprocess.Popen[bytes]]) -> float:
    return sum(procs.tree_usage(w.pid, memory=False).cpu for w in workers)


def postgres_cpu(db: PostgresDatabase | None) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving ``db``, by pid (none for no database)."""
    if db is None:
        return {}
    found: dict[int, float] = {}
    for proc in db.backends():
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue  # ended between listing and reading
        found[proc.pid] = times.user + times.system
    return found


@dataclass(kw_only=True)
class DrainRun(DrainRates):
    """What ``watch`` measures of one drain and ``drain_once`` checks; a section's run adds
    what it drains (its case, backend, workers and jobs) and what it measures besides."""

    startup_s: float = 0.0
    steady_s: float = 0.0
    total_s: float = 0.0
    #: CPU seconds of all worker trees, and of the PostgreSQL backends serving the database,
    #: from the first job done to the last.
    worker_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0
    progress: list[tuple[float, int]] = field(default_factory=list)
    load_before: float = 0.0
    checks: dict[str, int] = field(default_factory=dict)
    error: str = ""

    def tenth_rate(self, last: bool) -> float:
        return tenth_rate(self, last)


class Drained(Drain, Protocol):
    error: str
    load_before: float
    checks: dict[str, int]


def drain_once(
    one: Drained,
    broker: BenchBroker,
    jobs_module: str,
    label: str,
    workdir: Path,
    prepare: Callable[[], None],
    **settings: str,
) -> None:
    """One timed drain of ``one.jobs`` jobs: ``prepare`` (empty the broker and put the jobs in),
    the workers watched through the marker file ``label``.marker (their log ``label``.log), then
    the checks: the marker holds one byte a job and the queue is empty. What failed is ``one.error``.
    ``settings``: more environment variables for the workers, as for ``watch``."""
    marker = workdir / f"{label}.marker"
    marker.write_bytes(b"")
    try:
        prepare()
        one.load_before = os.getloadavg()[0]
        watch(one, broker, jobs_module, marker, workdir / f"{label}.log", **settings)
        one.checks = {"marker_bytes": marker.stat().st_size, "queued_left": broker.queued(QUEUE)}
    except RUN_ERRORS as exc:
        one.error = one.error or one_line(exc)
        return
    if one.checks["marker_bytes"] != one.jobs:
        one.error = f"{one.checks['marker_bytes']} jobs ran, expected {one.jobs}"
    elif one.checks["queued_left"]:
        one.error = f"{one.checks['queued_left']} jobs left in the queue"


def one_line(exc: BaseException) -> str:
    """An exception as a run's error: on one line, and short enough for the report."""
    return " ".join(str(exc).split())[:1500]


def say(label: str, error: str, summary: str) -> None:
    """A run's line on stderr: ``summary``, or why it failed (the end of its error)."""
    print(f"{label}: FAILED: {error[-300:]}" if error else f"{label}: {summary}", file=sys.stderr)
