"""``Tracking.get_task`` latency on a big task, and the plans of the statements it runs.

Latency: the public call as an API handler makes it (``engine.connect()`` from the pool,
the library's engine settings, pre-ping included), timed one call at a time with
``perf_counter``, from 1 thread and from 8 concurrent threads (pool size above the thread
count, so each thread holds its own connection). Warm-up calls first: psycopg prepares a
statement after 5 executions and PostgreSQL may then switch to a generic plan, and the
measured calls should see the plans a long-running server sees.

Plans: the statements of one get_task are captured with a ``before_cursor_execute``
listener and explained twice: ``EXPLAIN (ANALYZE, BUFFERS)`` with the captured parameters
(the custom plan), and ``EXPLAIN EXECUTE`` of a PREPAREd copy under
``plan_cache_mode = force_generic_plan`` (the generic plan a prepared statement may switch
to). A plan *scans* a table when it reads it with a Seq Scan (every row); index scans that
read a bounded range are what get_task is designed to do.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql
from sqlalchemy import Connection, event

from asynctask import Client, Settings, Tracking
from asynctask.db.engine import create_database_engine
from bench.core.redis_server import RedisServer

#: Calls per thread before timing: more than psycopg's prepare threshold (5) plus the five custom
#: plans PostgreSQL makes before it may switch a prepared statement to its generic plan.
WARMUP = 20
#: Tables whose full read would make get_task cost grow with the task.
BIG_TABLES = ("asynctask_event", "asynctask_event_message")
_PARAM = re.compile(r"%\((\w+)\)s")


@dataclass
class Latency:
    threads: int
    calls: int
    wall_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    #: CPU time of the bench process (all threads) per call: the client side of get_task
    #: (SQLAlchemy, psycopg, building the view), which the GIL serialises across threads.
    client_cpu_ms: float
    #: Every call's latency, sorted (ms, µs precision): the raw data of the percentiles.
    samples_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def rate(self) -> float:
        return self.calls / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class Plan:
    statement: str
    parameters: dict[str, Any]
    custom: str
    generic: str
    #: "Node Type on relation (index)" for every scan node, custom plan then generic.
    scans: list[str] = field(default_factory=list)
    #: Scans that read a big table in full (Seq Scan): should stay empty.
    full_scans: list[str] = field(default_factory=list)


def measure(
    url: str, server: RedisServer, task_id: str, thread_counts: list[int], calls: int
) -> list[Latency]:
    """``calls`` get_task calls per thread count (split between the threads)."""
    engine = create_database_engine(url, pool_size=max(thread_counts) + 2, max_overflow=0)
    client = Client(Settings(redis_url=server.url))
    tracking = Tracking(client, engine)
    try:
        return [_latency(tracking, task_id, threads, calls) for threads in thread_counts]
    finally:
        client.broker.close()
        engine.dispose()


def _latency(tracking: Tracking, task_id: str, threads: int, calls: int) -> Latency:
    per_thread = max(1, calls // threads)
    samples: list[list[float]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def run(out: list[float]) -> None:
        for _ in range(WARMUP):
            tracking.get_task(task_id)
        barrier.wait()
        for _ in range(per_thread):
            start = time.perf_counter()
            tracking.get_task(task_id)
            out.append(time.perf_counter() - start)

    workers = [
        threading.Thread(target=run, args=(out,), name=f"get-task-{k}") for k, out in enumerate(samples)
    ]
    for worker in workers:
        worker.start()
    barrier.wait()
    start, cpu = time.perf_counter(), time.process_time()
    for worker in workers:
        worker.join()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    data = sorted(x * 1000 for out in samples for x in out)
    return Latency(
        threads=threads,
        calls=len(data),
        wall_s=wall,
        p50_ms=percentile(data, 50),
        p90_ms=percentile(data, 90),
        p99_ms=percentile(data, 99),
        max_ms=data[-1],
        mean_ms=statistics.fmean(data),
        client_cpu_ms=cpu / len(data) * 1000,
        samples_ms=[round(x, 3) for x in data],
    )


def percentile(data: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``data``."""
    rank = max(1, min(len(data), round(q / 100 * len(data) + 0.5)))
    return data[rank - 1]


def explain(url: str, server: RedisServer, task_id: str) -> list[Plan]:
    """Capture the statements of one ``get_task(task_id)`` and explain each."""
    engine = create_database_engine(url)
    client = Client(Settings(redis_url=server.url))
    captured: list[tuple[str, dict[str, Any]]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        captured.append((statement, dict(parameters or {})))

    try:
        event.listen(engine, "before_cursor_execute", capture)
        Tracking(client, engine).get_task(task_id)
        event.remove(engine, "before_cursor_execute", capture)
        with engine.connect() as connection:
            return [_plan(connection, statement, params) for statement, params in captured]
    finally:
        client.broker.close()
        engine.dispose()


def _plan(connection: Connection, statement: str, params: dict[str, Any]) -> Plan:
    custom_json = connection.exec_driver_sql(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params
    ).scalar_one()
    custom = _text(connection.exec_driver_sql("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).all())
    generic, generic_json = _generic(connection, statement, params)
    plan = Plan(statement, params, custom, generic)
    for label, tree in (("custom", custom_json), ("generic", generic_json)):
        for node in _nodes(tree[0]["Plan"]):
            relation, index = node.get("Relation Name"), node.get("Index Name")
            if relation is None and index is None:
                continue
            target = " ".join(
                part for part in (relation and f"on {relation}", index and f"using {index}") if part
            )
            scan = f"{label}: {node['Node Type']} {target}, {node.get('Actual Rows', '?')} rows"
            plan.scans.append(scan)
            if node["Node Type"] == "Seq Scan" and relation in BIG_TABLES:
                plan.full_scans.append(scan)
    return plan


def _generic(connection: Connection, statement: str, params: dict[str, Any]) -> tuple[str, Any]:
    """The generic plan: PREPARE the statement with $n placeholders, EXPLAIN EXECUTE it."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    prepared = _PARAM.sub(number, statement)
    raw = connection.connection.driver_connection
    literals = ", ".join(sql.Literal(params[name]).as_string(raw) for name in order)
    execute = f"EXECUTE bench_get_task({literals})" if order else "EXECUTE bench_get_task"
    connection.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
    connection.exec_driver_sql(f"PREPARE bench_get_task AS {prepared}")
    try:
        text = _text(connection.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {execute}").all())
        tree = connection.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {execute}").scalar_one()
    finally:
        connection.exec_driver_sql("DEALLOCATE bench_get_task")
        connection.exec_driver_sql("RESET plan_cache_mode")
    return text, tree


def _text(rows: Any) -> str:
    return "\n".join(str(row[0]) for row in rows)


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found.extend(_nodes(child))
    return found
