"""A big task built inside PostgreSQL (INSERT ... SELECT generate_series), for get_task latency.

Building through create_task and a worker would take minutes for a million events; the
server builds the same rows in seconds. The task is caught mid-run, as a dashboard would
see it: of every 10,000 events 7,000 finish, 100 failed, 50 error, 10 working and the rest
enqueue, spread over the id range by a multiplicative hash (so that errors are not all at
the start). Messages: "started" and the final text for every failed/error event and for
one in ten of the other started events. The task row's counts are computed from the
events, so they agree. Besides it, ``SMALL_TASKS`` finished tasks of ``SMALL_SIZE`` events
each, so that the big task is not alone in the tables. Then VACUUM ANALYZE, as autovacuum
would have done on a table that size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import create_engine, text

from asynctask.db.engine import normalize_url
from asynctask.tasks.creation import new_task_id

SMALL_TASKS = 1000
SMALL_SIZE = 10

#: Per 10,000 events (the remainder is "enqueue").
MIX = (("finish", 7000), ("failed", 100), ("error", 50), ("working", 10))

_STATUS = (
    "CASE "
    + " ".join(
        f"WHEN (i * 7919) % 10000 < {sum(n for _, n in MIX[: k + 1])} THEN '{name}'"
        for k, (name, _) in enumerate(MIX)
    )
    + " ELSE 'enqueue' END"
)

_EVENTS = """
INSERT INTO asynctask_event (job_id, task_id, job_name, status, params, attempt, error_class, error,
    seq, progress_seq, enqueued_at, started_at, finished_at, updated_at)
SELECT substr(md5(:prefix || g.i), 1, 24), {task}, 'TrackedNoopJob', g.status,
    jsonb_build_array(jsonb_build_array(g.i)),
    CASE WHEN g.status = 'enqueue' THEN 0 ELSE 1 END,
    CASE g.status WHEN 'failed' THEN 'JobFailed' WHEN 'error' THEN 'RuntimeError' END,
    CASE g.status WHEN 'failed' THEN 'item ' || g.i || ' rejected'
        WHEN 'error' THEN 'RuntimeError: upstream timed out for item ' || g.i END,
    CASE g.status WHEN 'enqueue' THEN 0 WHEN 'working' THEN 2 * g.i - 1 ELSE 2 * g.i END,
    0,
    :t0,
    CASE WHEN g.status <> 'enqueue' THEN :t0 + g.i * interval '1 millisecond' END,
    CASE WHEN g.status NOT IN ('enqueue', 'working') THEN :t0 + g.i * interval '1.5 millisecond' END,
    :t0 + g.i * interval '1.5 millisecond'
FROM (SELECT i, {status} AS status FROM generate_series(1::bigint, :n) AS i) AS g
"""

#: Event i of the small tasks belongs to task "small<i mod SMALL_TASKS>"; all of them finished.
_SMALL_TASK_ID = "'small' || lpad((g.i % :tasks)::text, 5, '0')"

_MESSAGES = """
INSERT INTO asynctask_event_message (event_id, seq, at, status, text)
SELECT e.id, 2 * e.id - 1, e.started_at, 'working', 'started'
FROM asynctask_event e
WHERE e.status <> 'enqueue' AND (e.status IN ('failed', 'error') OR e.id % 10 = 0)
UNION ALL
SELECT e.id, 2 * e.id, e.finished_at, e.status, coalesce(e.error, 'finished')
FROM asynctask_event e
WHERE e.status IN ('finish', 'failed', 'error') AND (e.status IN ('failed', 'error') OR e.id % 10 = 0)
"""

_TASK = """
INSERT INTO asynctask_task (id, job_name, queue, tenant, meta, state, total, chunk_size,
    count_enqueue, count_working, count_finish, count_failed, count_error, count_cancelled,
    created_at, started_at, finished_at, cancelled_at)
VALUES (:task, 'TrackedNoopJob', 'default', 'bench', NULL, 'ready', :n, 1, 0, 0, 0, 0, 0, 0,
    :t0, :t0, NULL, NULL)
"""

_SMALL_TASKS = """
INSERT INTO asynctask_task (id, job_name, queue, tenant, meta, state, total, chunk_size,
    count_enqueue, count_working, count_finish, count_failed, count_error, count_cancelled,
    created_at, started_at, finished_at, cancelled_at)
SELECT 'small' || lpad(k::text, 5, '0'), 'TrackedNoopJob', 'default', 'bench', NULL, 'ready', :size, 1,
    0, 0, 0, 0, 0, 0, :t0, :t0, NULL, NULL
FROM generate_series(0, :tasks - 1) AS k
"""

_COUNTS = """
UPDATE asynctask_task t SET
    count_enqueue = c.enqueue, count_working = c.working, count_finish = c.finish,
    count_failed = c.failed, count_error = c.error, count_cancelled = c.cancelled,
    finished_at = CASE WHEN c.enqueue + c.working = 0 THEN :t0 END
FROM (
    SELECT task_id,
        count(*) FILTER (WHERE status = 'enqueue') AS enqueue,
        count(*) FILTER (WHERE status = 'working') AS working,
        count(*) FILTER (WHERE status = 'finish') AS finish,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        count(*) FILTER (WHERE status = 'error') AS error,
        count(*) FILTER (WHERE status = 'cancelled') AS cancelled
    FROM asynctask_event GROUP BY task_id
) AS c
WHERE t.id = c.task_id
"""


@dataclass
class BigTask:
    task_id: str
    events: int
    messages: int
    small_tasks: int
    build_s: float
    counts: dict[str, int]


def build(url: str, events: int) -> BigTask:
    """Fill the (empty) tracking tables at ``url``; return the big task's id and what was built."""
    start = time.perf_counter()
    task_id = new_task_id()
    engine = create_engine(normalize_url(url))
    try:
        with engine.begin() as connection:
            t0 = connection.exec_driver_sql("SELECT now() - interval '1 hour'").scalar()
            connection.execute(text(_TASK), {"task": task_id, "n": events, "t0": t0})
            big = _EVENTS.format(task=":task", status=_STATUS)
            connection.execute(text(big), {"prefix": "big", "task": task_id, "n": events, "t0": t0})
            connection.execute(text(_SMALL_TASKS), {"size": SMALL_SIZE, "tasks": SMALL_TASKS, "t0": t0})
            small_events = _EVENTS.format(task=_SMALL_TASK_ID, status="'finish'")
            connection.execute(
                text(small_events),
                {"prefix": "small", "n": SMALL_TASKS * SMALL_SIZE, "t0": t0, "tasks": SMALL_TASKS},
            )
            connection.execute(text(_MESSAGES))
            connection.execute(text(_COUNTS), {"t0": t0})
            messages = connection.exec_driver_sql("SELECT count(*) FROM asynctask_event_message").scalar_one()
            row = (
                connection.execute(text("SELECT * FROM asynctask_task WHERE id = :task"), {"task": task_id})
                .one()
                ._mapping
            )
            counts = {k.removeprefix("count_"): int(v) for k, v in row.items() if k.startswith("count_")}
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql(
                "VACUUM (ANALYZE) asynctask_task, asynctask_event, asynctask_event_message"
            )
    finally:
        engine.dispose()
    return BigTask(task_id, events, int(messages), SMALL_TASKS, time.perf_counter() - start, counts)
