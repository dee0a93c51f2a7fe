"""The read model's cost does not grow with a task's size: ``get_task`` and a filtered
``list_events`` page never scan a task's events, checked on PostgreSQL's real query plans.

One task of 200,000 events (and 400,000 messages), a small one, and a few thousand events of
other tasks are written with server-side SQL and analysed. Every statement the read model
issues is captured and explained twice with its real parameters: once as run now (a custom
plan) and once as a generic plan, which is what PostgreSQL may switch to once psycopg has
prepared a statement it runs often. ``EXPLAIN ANALYZE`` gives the rows each node really
read, so "does not scan" is measured, not guessed from the node names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from sqlalchemy import Connection, Engine, event, insert, text

from asynctask import Client, Tracking
from asynctask.db.base import Base
from asynctask.db.engine import create_database_engine
from asynctask.tasks.creation import new_task_id
from asynctask.tracking.models import Task
from tests.conftest import fresh_postgres_schema

BIG = 200_000
SMALL = 10
OTHER_TASKS = 20
OTHER_EVENTS = 250
#: Tasks without events (other tenants' history), so that the task table is too big to be
#: read whole and a lookup must use its primary key.
EMPTY_TASKS = 5_000
#: A sequential scan of a table this small is how PostgreSQL reads one row of it best.
TINY_TABLE = 50
PK_TASK = "pk_asynctask_task"
EVENT_TABLES = frozenset({"asynctask_event", "asynctask_event_message"})
#: Most rows any plan node may read from the event tables: a page of 51 events has 102
#: messages. A scan of the big task would read hundreds of thousands.
MAX_ROWS_READ = 200

#: Statuses of the big task: failures only in its last quarter (a plan walking the task's
#: events in id order until it finds ten would read 150,000 rows first), errors spread thin.
BIG_STATUS = """CASE WHEN g > 150000 AND g % 25 = 0 THEN 'failed'
                     WHEN g % 1000 = 500 THEN 'error' ELSE 'finish' END"""
SMALL_STATUS = "CASE WHEN g % 5 = 0 THEN 'failed' WHEN g = 3 THEN 'error' ELSE 'finish' END"
OTHER_STATUS = "CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'finish' END"


@dataclass(frozen=True)
class Dataset:
    engine: Engine
    big: str
    small: str
    #: Index name -> table, to tell which table a bitmap index scan reads.
    index_tables: dict[str, str]


def _add_task(connection: Connection, task_id: str) -> None:
    connection.execute(
        insert(Task).values(
            id=task_id,
            job_name="bulk",
            queue="default",
            state="ready",
            total=0,
            chunk_size=1,
            count_enqueue=0,
            count_working=0,
            count_finish=0,
            count_failed=0,
            count_error=0,
            count_cancelled=0,
            count_stopped=0,
            created_at=text("now()"),
            started_at=text("now()"),
        )
    )


def _add_events(connection: Connection, task_id: str, count: int, status_sql: str) -> None:
    """``count`` finished events of ``task_id``, made by the server (statuses from ``status_sql``)."""
    connection.execute(
        text(
            f"""
            INSERT INTO asynctask_event (job_id, task_id, job_name, status, params, attempt,
                error_class, error, seq, progress_seq, enqueued_at, started_at, finished_at, updated_at)
            SELECT md5(:task || '-' || g), :task, 'bulk', s.status,
                jsonb_build_array(jsonb_build_array(g)), 1,
                CASE s.status WHEN 'failed' THEN 'asynctask.JobFailed'
                              WHEN 'error' THEN 'RuntimeError' END,
                CASE s.status WHEN 'failed' THEN 'item ' || g || ' rejected'
                              WHEN 'error' THEN 'RuntimeError: item ' || g || ' exploded' END,
                2 * g + 1, 2 * g + 1, now(), now(), now(), now()
            FROM generate_series(1, :count) AS g
            CROSS JOIN LATERAL (SELECT {status_sql} AS status) AS s
            """
        ),
        {"task": task_id, "count": count},
    )


@pytest.fixture(scope="module")
def dataset() -> Iterator[Dataset]:
    """A fresh schema on the shared PostgreSQL (dropped afterwards) holding the big dataset.

    Module-scoped: both tests read the same data, which takes a few seconds to write.
    """
    with fresh_postgres_schema() as url:
        engine = create_database_engine(url)
        try:
            Base.metadata.create_all(engine)
            big, small = new_task_id(), new_task_id()
            others = [new_task_id() for _ in range(OTHER_TASKS)]
            with engine.begin() as connection:
                for task_id in [big, small, *others]:
                    _add_task(connection, task_id)
                connection.execute(
                    text(
                        """
                        INSERT INTO asynctask_task (id, job_name, queue, tenant, state, total, chunk_size,
                            count_enqueue, count_working, count_finish, count_failed, count_error,
                            count_cancelled, count_stopped, created_at)
                        SELECT md5('empty-' || g), 'bulk', 'default', 'tenant-' || g % 40, 'ready', 0, 1,
                            0, 0, 0, 0, 0, 0, 0, now() - g * interval '1 minute'
                        FROM generate_series(1, :count) AS g
                        """
                    ),
                    {"count": EMPTY_TASKS},
                )
                # Other tasks' events before and after the big task's, as in a shared table.
                for task_id in others[: OTHER_TASKS // 2]:
                    _add_events(connection, task_id, OTHER_EVENTS, OTHER_STATUS)
                _add_events(connection, big, BIG, BIG_STATUS)
                _add_events(connection, small, SMALL, SMALL_STATUS)
                for task_id in others[OTHER_TASKS // 2 :]:
                    _add_events(connection, task_id, OTHER_EVENTS, OTHER_STATUS)
                # Each event's log: its start, then how it ended.
                connection.exec_driver_sql(
                    """
                    INSERT INTO asynctask_event_message (event_id, seq, at, status, text)
                    SELECT id, seq - 1, started_at, 'working', 'started' FROM asynctask_event
                    UNION ALL
                    SELECT id, seq, finished_at, status, coalesce(error, 'finished') FROM asynctask_event
                    """
                )
                # Task counts as the flusher keeps them: equal to what the events say.
                connection.exec_driver_sql(
                    """
                    UPDATE asynctask_task AS t
                    SET total = c.total, count_finish = c.finish, count_failed = c.failed,
                        count_error = c.error, finished_at = now()
                    FROM (SELECT task_id, count(*) AS total,
                                 count(*) FILTER (WHERE status = 'finish') AS finish,
                                 count(*) FILTER (WHERE status = 'failed') AS failed,
                                 count(*) FILTER (WHERE status = 'error') AS error
                          FROM asynctask_event GROUP BY task_id) AS c
                    WHERE t.id = c.task_id
                    """
                )
            with engine.connect() as connection:
                connection.exec_driver_sql("ANALYZE asynctask_task, asynctask_event, asynctask_event_message")
                connection.commit()
                index_tables = {
                    row.indexname: row.tablename
                    for row in connection.execute(
                        text(
                            "SELECT indexname, tablename FROM pg_indexes WHERE schemaname = current_schema()"
                        )
                    )
                }
            yield Dataset(engine, big, small, index_tables)
        finally:
            engine.dispose()


Statement = tuple[str, dict[str, Any]]


def capture(engine: Engine, call: Any) -> tuple[Any, list[Statement]]:
    """Run ``call()``; return its result and every statement it sent, with parameters."""
    statements: list[Statement] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, many: bool) -> None:
        assert not many, "the read model does not executemany"
        statements.append((statement, dict(parameters or {})))

    event.listen(engine, "before_cursor_execute", record)
    try:
        result = call()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return result, statements


def custom_plan(connection: Connection, statement: Statement) -> dict[str, Any]:
    """The plan PostgreSQL runs for these parameter values (executed: actual row counts)."""
    sql, params = statement
    result = connection.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).scalar()
    return _plan(result)


def _plan(result: Any) -> dict[str, Any]:
    """The root node of ``EXPLAIN (FORMAT JSON)`` output (psycopg decodes the json; be lenient)."""
    document = json.loads(result) if isinstance(result, str) else result
    assert isinstance(document, list), document
    plan: dict[str, Any] = document[0]["Plan"]
    return plan


_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


def generic_plan(connection: Connection, statement: Statement) -> dict[str, Any]:
    """The parameter-blind plan PostgreSQL may cache for a prepared statement, run with ``params``.

    psycopg prepares a statement on the server after it ran a few times; PostgreSQL then
    switches to a generic plan when its estimate looks no worse, so that plan must not scan
    either. PostgreSQL 15 has no ``EXPLAIN (GENERIC_PLAN)``, hence PREPARE + EXPLAIN EXECUTE
    under ``plan_cache_mode = force_generic_plan``.
    """
    sql, params = statement
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    prepared = _PLACEHOLDER.sub(number, sql)
    raw = connection.connection.dbapi_connection
    assert isinstance(raw, psycopg.Connection)
    # Client-side binding: EXECUTE's arguments go in as literals, not as server parameters.
    with psycopg.ClientCursor(raw) as cursor:
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE plan_probe AS {prepared}")
        try:
            arguments = ", ".join(["%s"] * len(names))
            cursor.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plan_probe({arguments})", [params[n] for n in names]
            )
            row = cursor.fetchone()
        finally:
            # Prepared statements outlive transactions; after an error the caller's rollback
            # is what cleans up, and a cleanup here would hide the error.
            if raw.info.transaction_status != psycopg.pq.TransactionStatus.INERROR:
                cursor.execute("DEALLOCATE plan_probe")
                cursor.execute("RESET plan_cache_mode")
    assert row is not None
    return _plan(row[0])


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def rows_read(node: dict[str, Any]) -> int:
    """Rows the node looked at: those it returned plus those it read and threw away."""
    returned = node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
    thrown = node.get("Rows Removed by Filter", 0) + node.get("Rows Removed by Index Recheck", 0)
    return int(returned + thrown)


def table_of(node: dict[str, Any], data: Dataset) -> str | None:
    if "Relation Name" in node:
        return str(node["Relation Name"])
    index = node.get("Index Name")
    return data.index_tables.get(index) if isinstance(index, str) else None


def render(plan: dict[str, Any], depth: int = 0) -> str:
    """One line per node: type, table or index, condition, rows read."""
    parts = [node_type := plan["Node Type"]]
    if "Index Name" in plan:
        parts.append(f"using {plan['Index Name']}")
    if "Relation Name" in plan:
        parts.append(f"on {plan['Relation Name']}")
    for key in ("Index Cond", "Recheck Cond", "Filter", "Sort Key"):
        if key in plan:
            parts.append(f"{key.lower()}={plan[key]}")
    parts.append(f"read={rows_read(plan)}" if "Scan" in node_type else f"rows={plan.get('Actual Rows')}")
    line = "  " * depth + " ".join(str(p) for p in parts)
    return "\n".join([line, *(render(child, depth + 1) for child in plan.get("Plans", []))])


def problems(plan: dict[str, Any], data: Dataset) -> list[str]:
    """What is wrong with ``plan``: scans of the event tables, or of the task table beyond a key lookup."""
    found = []
    for node in nodes(plan):
        table = table_of(node, data)
        kind = node["Node Type"]
        if table in EVENT_TABLES:
            if kind == "Seq Scan":
                found.append(f"Seq Scan on {table}")
            elif rows_read(node) > MAX_ROWS_READ:
                found.append(f"{kind} on {table} read {rows_read(node)} rows")
            elif kind in ("Index Scan", "Index Only Scan") and "Index Cond" not in node:
                found.append(f"full index scan of {node['Index Name']} (no Index Cond)")
        elif table == "asynctask_task":
            by_key = kind in ("Index Scan", "Index Only Scan") and node.get("Index Name") == PK_TASK
            tiny = kind == "Seq Scan" and rows_read(node) <= TINY_TABLE
            if not (by_key or tiny):
                found.append(f"{kind} on asynctask_task reading {rows_read(node)} rows")
        elif table is not None:
            found.append(f"unexpected table {table}")
    return found


def check_plans(data: Dataset, statements: list[Statement], what: str) -> None:
    """Explain every statement both ways, print the plans, and fail on any scan of events."""
    failures = []
    with data.engine.connect() as connection:
        for number, statement in enumerate(statements, 1):
            sql, params = statement
            shown = f"{' '.join(sql.split())[:160]}...\n    params {str(params)[:200]}"
            print(f"\n--- {what}, statement {number}: {shown}")
            for mode, explain in (("custom", custom_plan), ("generic", generic_plan)):
                plan = explain(connection, statement)
                print(f"  [{mode} plan]\n" + "\n".join("    " + line for line in render(plan).splitlines()))
                failures += [f"{what} #{number} ({mode}): {p}" for p in problems(plan, data)]
        connection.rollback()
    assert not failures, "\n".join(failures)


def test_get_task_reads_the_task_row_and_a_few_errors_however_big_the_task(
    dataset: Dataset, redis_client: Client
) -> None:
    tracking = Tracking(redis_client, dataset.engine)
    # A first call connects and lets the dialect ask the server its version and settings;
    # those one-time statements are not the read model's.
    tracking.get_task(dataset.small)

    small, small_statements = capture(dataset.engine, lambda: tracking.get_task(dataset.small))
    big, big_statements = capture(dataset.engine, lambda: tracking.get_task(dataset.big))

    assert small.total == SMALL and small.counts["failed"] == 2 and small.counts["error"] == 1
    assert big.total == BIG and big.status == "finished_with_errors"
    assert big.counts == {
        "enqueue": 0,
        "working": 0,
        "finish": 197_850,
        "failed": 2_000,
        "error": 150,
        "cancelled": 0,
        "stopped": 0,
        "lost": 0,
    }
    # The first ten errors by creation order: the early "error" events, with their logs.
    assert [e.status for e in big.errors] == ["error"] * 10
    assert all(len(e.messages) == 2 for e in big.errors)
    # The task row, the first failed, the first errors, their messages: four, whatever the size.
    assert len(small_statements) == len(big_statements) == 3
    check_plans(dataset, big_statements, "get_task(big)")

    # The checker itself sees a scan when there is one (so a pass above means something).
    with dataset.engine.connect() as connection:
        scan = ("SELECT count(*) FROM asynctask_event WHERE task_id = %(task)s", {"task": dataset.big})
        assert problems(custom_plan(connection, scan), dataset)
        assert problems(generic_plan(connection, scan), dataset)


def test_a_filtered_page_of_events_is_an_index_range_scan(dataset: Dataset, redis_client: Client) -> None:
    tracking = Tracking(redis_client, dataset.engine)
    tracking.get_task(dataset.small)
    with dataset.engine.connect() as connection:
        # A cursor deep inside the big task's failures: the 1,001st failed event.
        cursor = connection.execute(
            text(
                "SELECT id FROM asynctask_event WHERE task_id = :task AND status = 'failed' "
                "ORDER BY id OFFSET 1000 LIMIT 1"
            ),
            {"task": dataset.big},
        ).scalar_one()

    page, statements = capture(
        dataset.engine, lambda: tracking.list_events(dataset.big, status="failed", after=cursor, limit=50)
    )
    small_page, small_statements = capture(
        dataset.engine, lambda: tracking.list_events(dataset.small, status="failed", after=0, limit=50)
    )

    assert len(page.items) == 50 and page.next_cursor == str(page.items[-1].id)
    assert all(e.status == "failed" and e.id > cursor for e in page.items)
    assert [e.id for e in page.items] == sorted(e.id for e in page.items)
    assert len(small_page.items) == 2 and small_page.next_cursor is None
    # The task row (it must exist), the page, its messages.
    assert len(statements) == len(small_statements) == 3
    check_plans(dataset, statements, "list_events(big, failed, after)")
