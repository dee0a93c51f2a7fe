"""``tasks_by_status`` says what ``get_task`` says, task by task, in one statement: on SQLite and
PostgreSQL, for a task row of every shape the status is computed from (each branch of the
read model's status, and the edges between them)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import Engine, event, insert

from asynctask.db.engine import autocommit
from asynctask.tasks.creation import new_task_id
from asynctask.tracking import queries
from asynctask.tracking.counts import tasks_by_status
from asynctask.tracking.models import Task
from asynctask.tracking.status import EventStatus, TaskStatus

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

#: (state, total, counts, started, the status get_task reports).
SHAPES: list[tuple[str, int, dict[str, int], bool, str]] = [
    ("creating", 5, {"enqueue": 5}, False, "creating"),
    ("aborted", 5, {"enqueue": 5}, False, "aborted"),
    ("cancelled", 5, {"finish": 2, "cancelled": 3}, True, "cancelled"),
    ("ready", 5, {"enqueue": 5}, False, "pending"),
    ("ready", 5, {"enqueue": 4, "working": 1}, True, "running"),
    # A stopped job makes a task running, even one stopped before anything started.
    ("ready", 5, {"enqueue": 4, "stopped": 1}, False, "running"),
    # Started once, its job interrupted and waiting again.
    ("ready", 5, {"enqueue": 5}, True, "running"),
    ("ready", 5, {"enqueue": 4, "finish": 1}, False, "running"),
    ("ready", 5, {"finish": 5}, True, "finished"),
    # Cancelled jobs count as done, and not as errors.
    ("ready", 5, {"finish": 4, "cancelled": 1}, True, "finished"),
    ("ready", 0, {}, False, "finished"),
    ("ready", 5, {"finish": 4, "failed": 1}, True, "finished_with_errors"),
    ("ready", 5, {"finish": 4, "error": 1}, True, "finished_with_errors"),
    ("ready", 5, {"working": 1, "failed": 4}, True, "running"),
]


def test_every_shape_of_task_is_counted_under_the_status_get_task_reports(database_engine: Engine) -> None:
    ids: list[str] = []
    with database_engine.begin() as connection:
        # Shape n has n + 1 tasks, so that a count given to the wrong status shows.
        for n, (state, total, counts, started, _) in enumerate(SHAPES):
            for _ in range(n + 1):
                ids.append(new_task_id())
                connection.execute(
                    insert(Task).values(
                        id=ids[-1],
                        job_name="bulk",
                        queue="default",
                        state=state,
                        total=total,
                        chunk_size=1,
                        created_at=NOW,
                        started_at=NOW if started else None,
                        **{f"count_{status}": counts.get(status, 0) for status in EventStatus},
                    )
                )
    statements: list[str] = []
    event.listen(database_engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    # As /metrics reads it: outside a transaction.
    with autocommit(database_engine).connect() as connection:
        counted = tasks_by_status(connection)
    assert len(statements) == 1 and "asynctask_event" not in statements[0]

    with database_engine.connect() as connection:
        reported = Counter(queries.get_task(connection, task_id).status for task_id in ids)
    assert counted == {status.value: reported[status.value] for status in TaskStatus}
    expected = Counter[str]()
    for n, shape in enumerate(SHAPES):
        expected[shape[-1]] += n + 1
    assert reported == expected


def test_no_task_is_every_status_at_zero(database_engine: Engine) -> None:
    with database_engine.connect() as connection:
        assert tasks_by_status(connection) == {status.value: 0 for status in TaskStatus}
