"""The flow section: what concurrency keys cost the queue.

Three measures, each a drain of no-op jobs (bench/flow/jobs.py) timed from outside through the
marker file, as in the sql section (first job done -> last job done):

1. **Distinct keys vs none** (Redis, PostgreSQL): N jobs over K distinct keys at limit 1,
   against the same N jobs without a key; the two drains run one after the other, in an
   order that alternates between repetitions.
2. **One hot key** (Redis): N jobs of a single key at limit 1, so one runs at a time and each
   ack promotes the next: the serial rate of one line.
3. **Claim cost with a backlog** (PostgreSQL): N keyed jobs drained by 4 worker processes while
   W other keyed jobs wait in their keys' lines (their keys' slots held by jobs parked in a
   queue no worker reads), for a small and a large W, alternating. The EXPLAIN ANALYZE plans
   of the claim and of a promotion with the large backlog are kept for the report.

Every run starts from an empty broker (FLUSHALL of the bench's private Redis; TRUNCATE of the
section's private PostgreSQL database) and checks after the drain that the marker holds N
bytes, that the queue is empty, and that the parked jobs still wait.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import text

from asynctask import Client, Settings, default_registry
from asynctask.brokers.sql.flow import FlowStatements
from asynctask.brokers.sql.statements import Statements
from asynctask.db.engine import create_database_engine
from asynctask.job import JobDefinition
from bench.core.drain import (
    POSTGRESQL,
    REDIS,
    RUN_ERRORS,
    BenchBroker,
    DrainRun,
    drain_once,
    one_line,
    open_brokers,
    say,
)
from bench.core.redis_server import RedisServer
from bench.core.results import SectionResults, section_frame
from bench.flow.jobs import PARKED_QUEUE, flow_keyed, flow_parked, flow_plain
from bench.sql import db as sql_db

#: Jobs per bulk push.
BATCH = 1000
JOBS_MODULE = "bench/flow/jobs.py"

PLAIN = "no key"
KEYED = "distinct keys"
HOT = "one hot key"
BACKLOG = "backlog"


@dataclass
class FlowRun(DrainRun):
    case: str
    backend: str
    processes: int
    concurrency: int
    jobs: int
    #: Distinct keys of the drained jobs (0: none).
    keys: int
    #: Keyed jobs waiting in lines (parked) during the drain.
    waiting: int = 0
    push_s: float = 0.0

    @property
    def label(self) -> str:
        if self.case == BACKLOG:
            return f"{BACKLOG} of {self.waiting:,} waiting"
        return self.case


@dataclass
class FlowResults(SectionResults[FlowRun]):
    #: What EXPLAIN ANALYZE printed, by statement, with the largest backlog.
    plans: dict[str, str] = field(default_factory=dict)

    def errors(self) -> list[str]:
        failed = [f"{r.label} on {r.backend}: {r.error}" for _, r in self.runs if r.error]
        return self.failures + failed


def _still_waiting(broker: BenchBroker) -> int:
    """Parked jobs waiting in their keys' lines (PostgreSQL: state 'lane')."""
    return int(
        sql_db.query(
            broker.url,
            f"SELECT count(*) FROM asynctask_job WHERE queue = '{PARKED_QUEUE}' AND state = 'lane'",
        )[0][0]
    )


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> FlowResults:
    results = FlowResults(settings)
    with section_frame(results) as stack:
        brokers = open_brokers(results, pg_url, server, stack, "flow", results.settings["backends"])
        for rep in range(settings["reps"]):
            _repetition(results, brokers, rep, workdir)
    return results


def _repetition(results: FlowResults, brokers: list[BenchBroker], rep: int, workdir: Path) -> None:
    s = results.settings
    keys, jobs = s["keys"], s["jobs"]
    for broker in brokers:
        cases = [(PLAIN, flow_plain), (KEYED, flow_keyed)]
        for case, job in cases if rep % 2 == 0 else cases[::-1]:
            one = FlowRun(
                case, broker.backend, s["processes"], s["concurrency"], jobs, keys if job is flow_keyed else 0
            )
            _one(results, broker, one, job, [[f"k{i % keys}"] for i in range(jobs)], workdir, rep)
        if broker.backend == REDIS:
            one = FlowRun(HOT, REDIS, s["processes"], s["concurrency"], s["hot_jobs"], 1)
            _one(results, broker, one, flow_keyed, [["hot"]] * s["hot_jobs"], workdir, rep)
        if broker.backend == POSTGRESQL:
            sizes = s["backlogs"] if rep % 2 == 0 else s["backlogs"][::-1]
            for waiting in sizes:
                n = s["backlog_jobs"]
                one = FlowRun(BACKLOG, POSTGRESQL, s["backlog_processes"], s["concurrency"], n, keys, waiting)
                _one(results, broker, one, flow_keyed, [[f"k{i % keys}"] for i in range(n)], workdir, rep)


def _one(
    results: FlowResults,
    broker: BenchBroker,
    one: FlowRun,
    job: JobDefinition[Any],
    args: list[list[Any]],
    workdir: Path,
    rep: int,
) -> None:
    def push() -> None:
        broker.empty()
        if one.waiting:
            _park(broker.url, one.waiting, results.settings["parked_keys"])
        one.push_s = _push(broker.url, job, args)
        if one.waiting and one.waiting == max(results.settings["backlogs"]) and not results.plans:
            results.plans = _plans(broker.url)

    label = f"flow-{broker.backend}-{one.label.replace(' ', '_').replace(',', '')}-r{rep}"
    drain_once(one, broker, JOBS_MODULE, label, workdir, push)
    if one.waiting and one.checks:
        _check_waiting(one, broker)
    results.runs.append((rep, one))
    _say(rep, results.settings["reps"], one)


def _check_waiting(one: FlowRun, broker: BenchBroker) -> None:
    """The parked jobs must still wait in their lines: the drain promoted none of them."""
    try:
        one.checks["still_waiting"] = _still_waiting(broker)
    except RUN_ERRORS as exc:
        one.error = one.error or one_line(exc)
        return
    if not one.error and one.checks["still_waiting"] != one.waiting:
        one.error = f"{one.checks['still_waiting']} parked jobs waiting after the run, expected {one.waiting}"


def _client(url: str) -> Client:
    return Client(Settings(broker_url=url, tracking=False), registry=default_registry)


def _push(url: str, job: JobDefinition[Any], args: list[list[Any]]) -> float:
    client = _client(url)
    try:
        start = time.perf_counter()
        job.set(client=client).perform_bulk(args, batch_size=BATCH)
        return time.perf_counter() - start
    finally:
        client.close()


def _park(url: str, waiting: int, keys: int) -> None:
    """``waiting`` parked jobs waiting over ``keys`` keys, behind one slot holder per key."""
    _push(url, flow_parked, [[f"p{i % keys}"] for i in range(keys + waiting)])


def _plans(url: str) -> dict[str, str]:
    """EXPLAIN ANALYZE of the claim and of a promotion, in a transaction rolled back (both write)."""
    claim = Statements("postgresql").claim((False,), 10)
    promote = FlowStatements(True).promote
    engine = create_database_engine(url)
    try:
        with engine.connect() as connection:
            now = time.time()
            params = {"ids": [], "me": "bench-explain", "now": now, "queues": ["default"], "wanted": 10}
            plans = {"claim (10 jobs of queue default)": _explain(connection, claim.text, params)}
            parked = f"SELECT lane FROM asynctask_job WHERE queue = '{PARKED_QUEUE}' AND state = 'lane'"
            digest = connection.execute(text(f"{parked} LIMIT 1")).scalar_one()
            plans["promotion (a parked key's line)"] = _explain(
                connection, promote.text, {"digests": [digest], "now": now}
            )
            connection.rollback()
            return plans
    finally:
        engine.dispose()


def _explain(connection: Any, statement: str, params: dict[str, Any]) -> str:
    rows = connection.execute(text(f"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) {statement}"), params).all()
    return "\n".join(str(row[0]) for row in rows)


def _say(rep: int, reps: int, one: FlowRun) -> None:
    say(
        f"rep {rep + 1}/{reps} flow {one.label} on {one.backend}, {one.processes} proc x {one.concurrency}",
        one.error,
        f"{one.jobs:,} jobs, steady {one.steady_rate:,.0f}/s",
    )
