"""The sql section: no-op drain throughput of AsyncTask's SQL broker next to Huey and procrastinate.

For each repetition, each backend (SQLite, then PostgreSQL), each worker process count
(1, 2): AsyncTask and the backend's peer, one after the other, in an order that alternates
between repetitions (A B, then B A), so that noise and any after-effect of the previous run
hit both alike. One run: an empty database, N jobs enqueued in bulk where the system can
(timed apart), then P worker processes of C job slots each are spawned and timed until the
marker file holds N bytes (one per job; the bench polls its size every 2 ms and sends the
database nothing while the workers run). Then TERM, and the checks: N bytes exactly (no job
run twice, none lost) and no job left pending in the system's own table.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from bench.core import peers_venv, procs
from bench.core.drain import one_line, postgres_cpu, say
from bench.core.postgres import postgres_unreachable, shown
from bench.core.results import section_frame
from bench.core.system import ROOT
from bench.core.timing import MEMORY_SAMPLE, MIN_TIMEOUT, STOP_GRACE, DrainRates, drain_timeout, poll_marker
from bench.sql import db as sql_db
from bench.sql.db import PostgresDatabase
from bench.sql.systems import POSTGRESQL, SQLITE, SqlSystem, systems


@dataclass
class SqlRun(DrainRates):
    system: str
    backend: str
    processes: int
    concurrency: int
    jobs: int
    enqueue_s: float = 0.0
    startup_s: float = 0.0  # first spawn -> first job done
    steady_s: float = 0.0  # first job done -> last job done
    total_s: float = 0.0  # first spawn -> last job done
    #: All worker trees between first and last job done (CPU, context switches).
    worker_steady: procs.TreeUsage = field(default_factory=procs.TreeUsage)
    #: CPU seconds of the PostgreSQL backends serving the run's database, same interval
    #: (0 on SQLite, whose work is inside the workers).
    postgres_steady_cpu_s: float = 0.0
    #: Peak of the worker trees' summed RSS and PSS.
    peak_rss: int = 0
    peak_pss: int = 0
    #: TERM -> exit of the slowest worker (Huey's TERM is its immediate stop, the others' graceful).
    stop_s: float = 0.0
    #: 1-minute load average just before the run (other work on the machine shows here).
    load_before: float = 0.0
    checks: dict[str, int] = field(default_factory=dict)
    error: str = ""
    enqueue_failed: bool = False

    @property
    def enqueue_rate(self) -> float:
        return self.jobs / self.enqueue_s if self.enqueue_s > 0 else 0.0


@dataclass
class SqlResults:
    settings: dict[str, Any]
    #: (repetition, run), in the order they ran.
    runs: list[tuple[int, SqlRun]] = field(default_factory=list)
    #: System -> backend -> configuration lines.
    configs: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    #: Backend or peer -> where it ran, or "skipped: why".
    databases: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        failed = [
            f"{r.system} on {r.backend}, {r.processes} proc x {r.concurrency}: {r.error}"
            for _, r in self.runs
            if r.error
        ]
        return self.failures + failed


def run(settings: dict[str, Any], pg_url: str, workdir: Path) -> SqlResults:
    results = SqlResults(settings)
    # The stack holds the PostgreSQL databases, dropped at the end whatever happens.
    with section_frame(results, ("SQLAlchemy", "psycopg", "psycopg-binary")) as stack:
        backends = _backends(results, pg_url)
        # Where each system's runs start from: its SQLite template file, its PostgreSQL database.
        ready: dict[tuple[str, str], PostgresDatabase | Path] = {}
        if SQLITE in backends:
            results.versions["SQLite library"] = sql_db.sqlite_version()
            results.databases[SQLITE] = (
                "a new file per run in the bench's temporary directory, a copy of the system's "
                "template (set up once)"
            )
            ready.update(_templates(results, backends[SQLITE], workdir))
        if POSTGRESQL in backends:
            ready.update(_postgres(results, backends[POSTGRESQL], pg_url, stack))
        _rounds(results, backends, ready, workdir)
    return results


def _backends(results: SqlResults, pg_url: str) -> dict[str, list[SqlSystem]]:
    """The systems to run on each backend the settings name and this machine has."""
    settings = results.settings
    with_peers = _peers(results)
    backends: dict[str, list[SqlSystem]] = {}
    if SQLITE in settings["backends"]:
        backends[SQLITE] = systems(SQLITE, settings["tracked"])
    if POSTGRESQL in settings["backends"]:
        unreachable = postgres_unreachable(pg_url)
        if unreachable is None:
            backends[POSTGRESQL] = systems(POSTGRESQL, settings["tracked"])
        else:
            results.databases[POSTGRESQL] = f"skipped: {unreachable}"
            print(f"PostgreSQL not reachable ({unreachable}): no PostgreSQL rows", file=sys.stderr)
    for backend, members in backends.items():
        if not with_peers:
            members[:] = [s for s in members if not s.peer]
        for system in members:
            results.configs.setdefault(system.name, {})[backend] = system.describe()
    return backends


def _templates(
    results: SqlResults, members: list[SqlSystem], workdir: Path
) -> dict[tuple[str, str], PostgresDatabase | Path]:
    """Each system's SQLite file, set up once and copied for every run."""
    found: dict[tuple[str, str], PostgresDatabase | Path] = {}
    for system in members:
        template = workdir / f"sql-template-{sql_db.slug(system.name)}.db"
        try:
            system.setup(f"sqlite:///{template}")
            sql_db.sqlite_checkpoint(template)
        except (RuntimeError, OSError, subprocess.SubprocessError, sqlite3.Error) as exc:
            results.failures.append(f"{system.name} on {SQLITE}: setup: {exc}")
            continue
        found[(system.name, SQLITE)] = template
    return found


def _postgres(
    results: SqlResults, members: list[SqlSystem], pg_url: str, stack: ExitStack
) -> dict[tuple[str, str], PostgresDatabase | Path]:
    """Each system's private PostgreSQL database, set up once, dropped when ``stack`` closes."""
    found: dict[tuple[str, str], PostgresDatabase | Path] = {}
    names = []
    for system in members:
        db = stack.enter_context(PostgresDatabase(pg_url, system.name))
        names.append(f"`{db.name}`")
        try:
            system.setup(db.url)
        except (RuntimeError, subprocess.SubprocessError) as exc:
            results.failures.append(f"{system.name} on {POSTGRESQL}: setup: {exc}")
            continue
        found[(system.name, POSTGRESQL)] = db
    results.versions["PostgreSQL server"] = sql_db.postgres_version(pg_url)
    results.versions["PostgreSQL durability"] = sql_db.postgres_durability(pg_url)
    results.databases[POSTGRESQL] = (
        f"{shown(pg_url)}: one database per system ({', '.join(names)}), created for this run, dropped after"
    )
    return found


def _rounds(
    results: SqlResults,
    backends: dict[str, list[SqlSystem]],
    ready: dict[tuple[str, str], PostgresDatabase | Path],
    workdir: Path,
) -> None:
    settings = results.settings
    for rep in range(settings["reps"]):
        for backend, members in backends.items():
            for processes in settings["processes"]:
                for system in members if rep % 2 == 0 else members[::-1]:
                    database = ready.get((system.name, backend))
                    if database is None:
                        continue  # its setup or an enqueue failed, as results.failures says
                    one = drain(system, database, settings, processes, workdir, rep)
                    results.runs.append((rep, one))
                    _say(rep, settings["reps"], one)
                    if one.enqueue_failed:
                        # An enqueue that failed (or hung until its timeout) will fail again: the
                        # system's other runs on this backend would only cost time.
                        del ready[(system.name, backend)]
                        results.failures.append(
                            f"{system.name} on {backend}: not run again after its enqueue failed"
                        )


def _peers(results: SqlResults) -> bool:
    """Install or check the peers' venv; False (and the reason recorded) when it cannot be had."""
    try:
        took = peers_venv.ensure()
        results.versions.update({f"{k} (peers' venv)": v for k, v in peers_venv.versions().items()})
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        reason = " ".join(str(exc).split())[:300]
        results.databases["peers"] = f"skipped: {reason}"
        print(f"peers' venv unavailable ({reason}): AsyncTask only", file=sys.stderr)
        return False
    if took:
        results.seconds["peers' venv install"] = took
        print(f"installed the peers' venv in {took:.0f} s ({peers_venv.VENV})", file=sys.stderr)
    return True


def drain(
    system: SqlSystem,
    database: PostgresDatabase | Path,
    settings: dict[str, Any],
    processes: int,
    workdir: Path,
    rep: int,
) -> SqlRun:
    jobs, concurrency = settings["jobs"], settings["concurrency"]
    result = SqlRun(system.name, system.backend, processes, concurrency, jobs)
    label = f"{sql_db.slug(system.name)}-{system.backend}-p{processes}-r{rep}"
    marker = workdir / f"sql-marker-{label}"
    marker.write_bytes(b"")
    try:
        url = _fresh(database, workdir / f"sql-{label}.db")
        pg = database if isinstance(database, PostgresDatabase) else None
        result.enqueue_failed = True
        result.enqueue_s = _enqueue(system, url, jobs)
        result.enqueue_failed = False
        result.load_before = os.getloadavg()[0]
        _watch(result, system, url, pg, marker, workdir / f"sql-worker-{label}.log")
        pending = int(sql_db.query(url, system.pending_sql)[0][0])
        done = int(sql_db.query(url, system.done_sql)[0][0]) if system.done_sql else jobs
    except (RuntimeError, OSError, subprocess.SubprocessError, psycopg.Error, sqlite3.Error) as exc:
        result.error = result.error or one_line(exc)
        return result
    result.checks = {"marker_bytes": marker.stat().st_size, "pending_left": pending}
    if result.checks["marker_bytes"] != jobs and not result.error:
        result.error = f"{result.checks['marker_bytes']} jobs ran, expected {jobs}"
    if pending and not result.error:
        result.error = f"{pending} jobs still pending after the drain"
    if system.done_sql:
        result.checks["recorded_done"] = done
        if done != jobs and not result.error:
            result.error = f"{done} jobs recorded done, expected {jobs}"
    return result


def _fresh(database: PostgresDatabase | Path, sqlite_file: Path) -> str:
    """An empty, ready database for one run: the system's PostgreSQL database with its tables
    emptied, or a new SQLite file copied from the system's template (``database``)."""
    if isinstance(database, PostgresDatabase):
        database.empty()
        return database.url
    shutil.copyfile(database, sqlite_file)
    return f"sqlite:///{sqlite_file}"


def _enqueue(system: SqlSystem, url: str, jobs: int) -> float:
    out = subprocess.run(
        system.enqueue_argv(url, jobs),
        env=system.env(url, None),
        cwd=ROOT,
        capture_output=True,
        text=True,
        # The slowest enqueuer (Huey, one fsync'd commit per job) does some 500 jobs/s at worst.
        timeout=max(MIN_TIMEOUT, jobs / 200),
    )
    if out.returncode != 0:
        # A traceback ends with what failed: its tail is the useful part.
        raise RuntimeError(f"enqueue failed ({out.returncode}): {out.stderr.strip()[-600:]}")
    reported = json.loads(out.stdout.strip().splitlines()[-1])
    pending = int(sql_db.query(url, system.pending_sql)[0][0])
    if int(reported["jobs"]) != jobs or pending != jobs:
        raise RuntimeError(f"enqueue: asked {jobs}, reported {reported['jobs']}, pending {pending}")
    return float(reported["seconds"])


def _watch(
    result: SqlRun, system: SqlSystem, url: str, pg: PostgresDatabase | None, marker: Path, log: Path
) -> None:
    """Spawn the workers, poll the marker until N bytes, fill in timings, CPU and memory; stop them."""
    workers: list[subprocess.Popen[bytes]] = []
    spawned = time.monotonic()
    try:
        for _ in range(result.processes):
            argv = system.worker_argv(url, result.concurrency)
            workers.append(procs.spawn(argv, env=system.env(url, marker), cwd=ROOT, log=log))
        timeout = drain_timeout(result.jobs)
        worker_first = procs.TreeUsage()
        pg_first: dict[int, float] = {}
        next_memory = spawned
        for poll in poll_marker(marker, result.jobs):
            if poll.started:
                worker_first = _usage(workers, memory=False)
                pg_first = postgres_cpu(pg)
            if poll.last:
                last = _usage(workers, memory=True)
                pg_last = postgres_cpu(pg)
                result.worker_steady = last - worker_first
                result.postgres_steady_cpu_s = sum(
                    cpu - pg_first.get(pid, 0.0) for pid, cpu in pg_last.items()
                )
                result.peak_rss, result.peak_pss = (
                    max(result.peak_rss, last.rss),
                    max(result.peak_pss, last.pss),
                )
                first, now = poll.first, poll.now
                result.startup_s, result.steady_s, result.total_s = (
                    first - spawned,
                    now - first,
                    now - spawned,
                )
                return
            if poll.now >= next_memory:
                usage = _usage(workers, memory=True)
                result.peak_rss, result.peak_pss = (
                    max(result.peak_rss, usage.rss),
                    max(result.peak_pss, usage.pss),
                )
                next_memory = poll.now + MEMORY_SAMPLE
            procs.check_workers(workers, log, poll.done, result.jobs, poll.now - spawned, timeout)
    finally:
        result.stop_s = max(procs.stop_all(workers, grace=STOP_GRACE), default=0.0)


def _usage(workers: list[subprocess.Popen[bytes]], *, memory: bool) -> procs.TreeUsage:
    total = procs.TreeUsage()
    for worker in workers:
        one = procs.tree_usage(worker.pid, memory=memory)
        total.user, total.system = total.user + one.user, total.system + one.system
        total.voluntary, total.involuntary = (
            total.voluntary + one.voluntary,
            total.involuntary + one.involuntary,
        )
        total.rss, total.pss = total.rss + one.rss, total.pss + one.pss
    return total


def _say(rep: int, reps: int, one: SqlRun) -> None:
    say(
        f"rep {rep + 1}/{reps} {one.system} on {one.backend}, {one.processes} proc x {one.concurrency}",
        one.error,
        f"enqueue {one.enqueue_rate:,.0f}/s, steady {one.steady_rate:,.0f}/s, "
        f"incl. start-up {one.total_rate:,.0f}/s",
    )
