"""The tracking section: what task tracking costs a worker, create_task, and get_task.

Order of work (every pass starts from an empty Redis and an empty tracking database):

1. for each repetition: drain N jobs untracked, then tracked on PostgreSQL, then tracked on
   SQLite (interleaved, so that noise hits every mode alike);
2. for each repetition: create_task of M items on PostgreSQL, then on SQLite;
3. PostgreSQL only: build a task of E events in SQL, capture and explain the statements of
   get_task, then time get_task from 1 and from 8 threads.

Without a reachable PostgreSQL (``--pg-url``) the PostgreSQL parts are skipped and the
report says so; SQLite always runs.
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.core.machine import package_version
from bench.core.postgres import postgres_unreachable, shown
from bench.core.redis_server import RedisServer
from bench.tracking import data as tracking_data
from bench.tracking import read as tracking_read
from bench.tracking.create import CreateRun, create
from bench.tracking.db import Database, PostgresDatabase, SqliteFiles
from bench.tracking.drain import DrainRun, drain


@dataclass
class TrackingResults:
    settings: dict[str, Any]
    #: Database kind -> where it ran, or why it was skipped.
    databases: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    drains: list[tuple[int, DrainRun]] = field(default_factory=list)
    creates: list[tuple[int, CreateRun]] = field(default_factory=list)
    big_task: tracking_data.BigTask | None = None
    latencies: list[tracking_read.Latency] = field(default_factory=list)
    plans: list[tracking_read.Plan] = field(default_factory=list)
    #: Wall time of each part of the section, seconds.
    seconds: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        drains = [f"tracking drain {r.mode}: {r.error}" for _, r in self.drains if r.error]
        creates = [f"create_task {r.database}: {r.error}" for _, r in self.creates if r.error]
        return drains + creates + self.failures


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> TrackingResults:
    """Run the section; ``pg_url`` is the admin connection (``settings`` shows it password-less)."""
    results = TrackingResults(settings)
    started = time.monotonic()
    sqlite = SqliteFiles(workdir)
    unreachable = postgres_unreachable(pg_url)
    with ExitStack() as stack:
        databases: list[Database] = []
        if unreachable is None:
            pg = stack.enter_context(PostgresDatabase(pg_url))
            databases.append(pg)
            results.databases["postgresql"] = f"{shown(pg.url)} (created for this run, dropped after)"
        else:
            pg = None
            results.databases["postgresql"] = f"skipped: {unreachable}"
            print(f"PostgreSQL not reachable ({unreachable}): tracking on SQLite only", file=sys.stderr)
        databases.append(sqlite)
        results.databases["sqlite"] = "a new file per run in the bench's temporary directory"
        results.versions = _versions(databases)

        mark = time.monotonic()
        for rep in range(settings["tracking_reps"]):
            _drain_rep(results, rep, databases, server, workdir)
        results.seconds["drain"] = time.monotonic() - mark

        mark = time.monotonic()
        for rep in range(settings["create_reps"]):
            for database in databases:
                created = create(database.kind, database.fresh(), server, settings["create_items"])
                results.creates.append((rep, created))
                _say(f"rep {rep + 1} create_task {created.items} on {database.kind}", created.error, (
                    f"{created.total_s:.2f} s (SQL {created.sql_s:.2f}, push {created.push_s:.2f})"
                ))  # fmt: skip
        results.seconds["create_task"] = time.monotonic() - mark

        if pg is not None:
            mark = time.monotonic()
            _read(results, pg, server)
            results.seconds["get_task"] = time.monotonic() - mark
    results.seconds["total"] = time.monotonic() - started
    return results


def _drain_rep(
    results: TrackingResults, rep: int, databases: list[Database], server: RedisServer, workdir: Path
) -> None:
    s = results.settings
    modes: list[tuple[str, str | None]] = [("untracked", None)]
    modes += [(database.kind, database.fresh()) for database in databases]
    for mode, url in modes:
        done = drain(mode, url, server, s["tracking_jobs"], s["tracking_concurrency"], workdir)
        results.drains.append((rep, done))
        detail = f"enqueue {done.enqueue_s:.2f} s, executed {done.steady_rate:,.0f} jobs/s"
        if done.tracked:
            detail += f", SQL caught up {done.caught_up_s:.2f} s later ({done.caught_up_rate:,.0f} jobs/s)"
        _say(f"rep {rep + 1} drain {mode}", done.error, detail)


def _read(results: TrackingResults, pg: PostgresDatabase, server: RedisServer) -> None:
    s = results.settings
    url = pg.fresh()
    try:
        results.big_task = big = tracking_data.build(url, s["events"])
        _say(f"built a task of {big.events:,} events", "", f"{big.build_s:.1f} s")
        results.plans = tracking_read.explain(url, server, big.task_id)
        results.latencies = tracking_read.measure(
            url, server, big.task_id, s["get_task_threads"], s["get_task_calls"]
        )
    except Exception as exc:
        # Reported as a failure of this part; the rest of the bench still writes its report.
        results.failures.append(f"get_task: {type(exc).__name__}: {exc}")
        return
    for latency in results.latencies:
        _say(f"get_task x{latency.threads} threads", "", (
            f"p50 {latency.p50_ms:.2f} ms, p99 {latency.p99_ms:.2f} ms, {latency.rate:,.0f} calls/s"
        ))  # fmt: skip


def _versions(databases: list[Database]) -> dict[str, str]:
    versions = {name: package_version(name) for name in ("SQLAlchemy", "psycopg")}
    for database in databases:
        label = "PostgreSQL server" if database.kind == "postgresql" else "SQLite library"
        versions[label] = database.version()
    return versions


def _say(label: str, error: str, detail: str) -> None:
    print(f"{label}: {'FAILED: ' + error if error else detail}", file=sys.stderr)
