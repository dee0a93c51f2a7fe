"""How many tasks there are of each status ``get_task`` reports, in one statement.

The status is computed in SQL from the task row alone, as ``queries._status`` computes it in
Python (state, then the per-status counts against the total, then whether anything started):
the counts are columns, so no event is read, and the statement is one pass over the task table
whatever the number of events. The two must say the same; the API's tests compare them.
"""

from __future__ import annotations

from sqlalchemy import Connection, and_, case, func, select

from asynctask.tracking.models import Task
from asynctask.tracking.status import TaskState, TaskStatus

#: Jobs that did not end well, and items that failed in jobs that did.
_UNDONE = Task.count_failed + Task.count_error + Task.count_lost + Task.items_failed
_DONE = Task.count_finish + Task.count_failed + Task.count_error + Task.count_cancelled + Task.count_lost

_STATUS = case(
    (Task.state == TaskState.CREATING.value, TaskStatus.CREATING.value),
    (Task.state == TaskState.ABORTED.value, TaskStatus.ABORTED.value),
    (Task.state == TaskState.CANCELLED.value, TaskStatus.CANCELLED.value),
    (
        _DONE >= Task.total,
        case(
            (
                _UNDONE > 0,
                TaskStatus.FINISHED_WITH_ERRORS.value,
            ),
            else_=TaskStatus.FINISHED.value,
        ),
    ),
    (
        and_(Task.started_at.is_(None), _DONE == 0, Task.count_working + Task.count_stopped == 0),
        TaskStatus.PENDING.value,
    ),
    else_=TaskStatus.RUNNING.value,
)

# Grouped outside a subquery: PostgreSQL cannot tell that a GROUP BY repeating the CASE is the
# selected expression when each copy has parameters of its own.
_STATUSES = select(_STATUS.label("status")).subquery()
_BY_STATUS = select(_STATUSES.c.status, func.count()).group_by(_STATUSES.c.status)


def tasks_by_status(connection: Connection) -> dict[str, int]:
    """Every status ``get_task`` may report, with its number of tasks (0 for one no task has)."""
    counted = {status.value: 0 for status in TaskStatus}
    for status, count in connection.execute(_BY_STATUS):
        counted[status] = int(count)
    return counted
