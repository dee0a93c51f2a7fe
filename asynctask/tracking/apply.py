"""Applying a batch of transitions to SQL, in one transaction.

Rules that make a batch safe to apply more than once and in any order with other batches:
- a status transition changes an event only if its ``seq`` is above the event's ``seq``, so
  a late ``working`` never overwrites ``finish``, and a replayed batch changes nothing;
- a message is keyed by ``(event_id, seq)`` and inserted with ON CONFLICT DO NOTHING;
- task counts move by the difference between each event's status before and after, read
  under the row lock (``FOR UPDATE`` on PostgreSQL; SQLite writers hold the file lock), so
  counts stay equal to what the events say however many flushers run.
Rows are locked in a fixed order (events by job id, then tasks by id) so that two flushers
cannot deadlock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError

from asynctask.db.engine import as_utc
from asynctask.tracking import apply_items, apply_postgres, apply_sqlite, callbacks, parents
from asynctask.tracking.models import Event, EventMessage
from asynctask.tracking.status import TERMINAL, UNDONE, EventStatus, TaskState
from asynctask.tracking.transitions import ITEMS, LOG, PROGRESS, Transition

COUNT_COLUMN = {status: f"count_{status.value}" for status in EventStatus}
#: The count columns of jobs that will run again: enqueue, working, and stopped (a resume runs
#: a stopped job again). A task with any has not finished.
WAITING_COLUMNS = tuple(column for status, column in COUNT_COLUMN.items() if status not in TERMINAL)


def _task_update(param: Callable[[str], str], source: str = "") -> str:
    """Everything a batch changes in one task, in one statement, as plain SQL: a worker runs
    it for every job it settles, and SQLAlchemy's machinery would cost more than the update.
    ``param`` spells a named parameter in the driver's style, or a column of ``source`` (a
    FROM item that gives the values of several tasks at once).

    Counts move by their deltas (zero for the statuses that did not change). Any transition
    of a task's job proves its jobs were pushed: a task left in "creating" (or "aborted", if
    Redis ran the push but its reply was lost) by a create_task that failed after the push is
    healed here. ``finished_at`` is set once no job is left that will run again
    (``WAITING_COLUMNS``), judged on the counts as this statement leaves them (SET expressions
    read the row before the update, hence the deltas added again). It returns each task's id,
    ``finished_at`` and callback count: a task that has ended with callbacks fires them
    (``callbacks.fire``). The plain values are returned and judged in Python: on SQLite 3.40 a
    boolean expression over them in RETURNING was seen true for a row whose ``finished_at`` it
    returned NULL.
    """
    counts = ", ".join(f"{c} = {c} + {param('d_' + c)}" for c in COUNT_COLUMN.values())
    waiting = " + ".join(f"{c} + {param('d_' + c)}" for c in WAITING_COLUMNS)
    stale = f"'{TaskState.CREATING.value}', '{TaskState.ABORTED.value}'"
    return (
        f"UPDATE asynctask_task SET "
        f"state = CASE WHEN state IN ({stale}) THEN '{TaskState.READY.value}' ELSE state END, {counts}, "
        f"started_at = coalesce(started_at, {param('started')}), "
        f"finished_at = CASE WHEN {waiting} = 0 THEN coalesce(finished_at, {param('now')}) ELSE NULL END "
        f"{source}WHERE id = {param('id')} "
        f"RETURNING id, finished_at, callbacks, children"
    )


TASK_UPDATE = {
    "postgresql": _task_update(lambda name: f"%({name})s"),
    "sqlite": _task_update(lambda name: f":{name}"),
}
#: PostgreSQL's columns of a batch's task values, with their array types (``TASKS_UPDATE``).
TASK_ARRAYS = {"id": "text", "started": "timestamptz", "now": "timestamptz"} | {
    f"d_{column}": "int" for column in COUNT_COLUMN.values()
}
# The values' "id" is named "task" so that the table's own "id" stays unambiguous.
TASKS_UPDATE = _task_update(
    lambda name: f"v.{'task' if name == 'id' else name}",
    source="FROM unnest("
    + ", ".join(f"%({name})b::{kind}[]" for name, kind in TASK_ARRAYS.items())
    + ") AS v("
    + ", ".join("task" if name == "id" else name for name in TASK_ARRAYS)
    + ") ",
)
#: Locks a batch's tasks in id order, as the one-task-at-a-time updates do, before one
#: statement updates them all in whatever order its join meets them.
LOCK_TASKS = "SELECT 1 FROM asynctask_task WHERE id = ANY(%(ids)b::text[]) ORDER BY id FOR UPDATE"


class _Statements(Protocol):
    """What ``apply_postgres`` and ``apply_sqlite`` each provide."""

    def load(self, connection: Connection, job_ids: Sequence[str]) -> Sequence[Any]: ...

    def insert_messages(self, connection: Connection, messages: list[dict[str, Any]]) -> dict[int, int]: ...

    def update_events(
        self, connection: Connection, changes: dict[int, dict[str, Any]], starts: dict[int, int]
    ) -> None: ...


def utc(at: float) -> datetime:
    return datetime.fromtimestamp(at, UTC)


@dataclass
class _EventState:
    id: int
    task_id: str | None
    status: str
    seq: int
    progress_seq: int
    #: Start of the latest run.
    started_at: datetime | None
    changes: dict[str, Any] = field(default_factory=dict)


class Applied(NamedTuple):
    """What a batch changed: how many events, the task callbacks it made due, and the tasks
    whose held jobs it made due for release or drop (``parents.settle``)."""

    events: int
    due: tuple[int, ...]
    holds: tuple[str, ...] = ()


NOTHING = Applied(0, ())


def combined(parts: Sequence[Applied]) -> Applied:
    """What several parts of one batch changed, together."""
    return Applied(
        sum(a.events for a in parts),
        tuple(i for a in parts for i in a.due),
        tuple(t for a in parts for t in a.holds),
    )


def apply_transitions(connection: Connection, batch: Sequence[Transition]) -> Applied:
    """Apply ``batch`` (any order) inside the caller's transaction: the callbacks of the tasks
    it ends are made due in it (``callbacks.fire``), and so are the holds of the tasks waiting
    for them (``parents.settle``), for the caller to act on after."""
    by_job: dict[str, list[Transition]] = defaultdict(list)
    for transition in sorted(batch, key=lambda t: t.seq):
        by_job[transition.jid].append(transition)
    if not by_job:
        return NOTHING
    states = _load(connection, sorted(by_job))
    missing = [jid for jid in sorted(by_job) if jid not in states]
    if missing:
        _insert_standalone(connection, missing, by_job)
        states.update(_load(connection, missing))
    messages: list[dict[str, Any]] = []
    deltas: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    started: dict[str, datetime] = {}
    items: list[tuple[int, str | None, Transition]] = []
    for jid, transitions in by_job.items():
        state = states[jid]
        before = state.status
        for transition in transitions:
            if transition.kind == ITEMS:
                items.append((state.id, state.task_id, transition))
            else:
                messages.extend(_step(state, transition))
        if state.task_id is not None:
            if state.status != before:
                deltas[state.task_id][before] -= 1
                deltas[state.task_id][state.status] += 1
            for transition in transitions:
                if transition.kind == EventStatus.WORKING:
                    at = utc(transition.at)
                    if state.task_id not in started or at < started[state.task_id]:
                        started[state.task_id] = at
    changes = {s.id: s.changes for s in states.values() if s.changes}
    dialect = _dialect(connection)
    dialect.update_events(connection, changes, dialect.insert_messages(connection, messages))
    ended = _update_tasks(
        connection, deltas, started, touched={s.task_id for s in states.values() if s.task_id}
    )
    if items:
        # After the tasks' update: their rows are locked already, in the same order.
        apply_items.apply(connection, items)
    # After the items too: a failed item decides whether the task succeeded.
    if not ended:
        return Applied(len(changes), ())
    settled = parents.settle(connection, [e.id for e in ended if e.children])
    fired = callbacks.fire(connection, [e.id for e in ended if e.callbacks] + settled.ended)
    return Applied(len(changes), tuple(fired), tuple(settled.holds))


def _step(state: _EventState, t: Transition) -> list[dict[str, Any]]:
    """Fold one transition into ``state``; return the message it appends, if any."""
    at = utc(t.at)
    if t.kind == PROGRESS:
        if t.seq > state.progress_seq:
            state.progress_seq = t.seq
            state.changes.update(progress_done=t.done, progress_total=t.total, progress_seq=t.seq)
        return []
    if t.kind == LOG:
        return [_message(state, t, at, state.status)] if t.text else []
    if t.seq > state.seq:
        state.status, state.seq = t.kind, t.seq
        changes: dict[str, Any] = {"status": t.kind, "seq": t.seq, "updated_at": at}
        if t.kind == EventStatus.WORKING:
            if state.progress_seq:
                # A new run starts without the last one's progress. An event whose
                # ``progress_seq`` is still 0 never had any (every report sets it): nothing to
                # clear, and a first run's update sends two columns fewer.
                changes.update(progress_done=None, progress_total=None)
            state.progress_seq = t.seq
            state.started_at = at
            changes.update(started_at=at, finished_at=None, progress_seq=t.seq)
        elif t.kind == EventStatus.ENQUEUE:
            changes.update(enqueued_at=at, finished_at=None)
        elif t.kind != EventStatus.STOPPED:
            # A stopped job has not ended (a resume runs it again): it gets no finish time.
            changes["finished_at"] = at
        if t.kind in UNDONE:
            changes.update(error=t.text, error_class=t.error_class)
        state.changes.update(changes)
    elif t.kind == EventStatus.WORKING and (state.started_at is None or at > state.started_at):
        # A start applied after a later status (flushers raced, or one retried a batch after
        # an outage): the status stays, but the run's start time is still recorded.
        state.started_at = at
        state.changes["started_at"] = at
    # A start always leaves a message (attempts are counted from them).
    return [_message(state, t, at, t.kind)] if t.text or t.kind == EventStatus.WORKING else []


def _message(state: _EventState, t: Transition, at: datetime, status: str) -> dict[str, Any]:
    starts = t.kind == EventStatus.WORKING
    text = t.text or "started"
    return {"event_id": state.id, "seq": t.seq, "at": at, "status": status, "text": text, "starts": starts}


def _load(connection: Connection, job_ids: Sequence[str]) -> dict[str, _EventState]:
    return {
        job_id: _EventState(id_, task_id, status, seq, progress_seq, as_utc(started_at))
        for job_id, id_, task_id, status, seq, progress_seq, started_at in _dialect(connection).load(
            connection, job_ids
        )
    }


def _insert_standalone(
    connection: Connection, job_ids: Iterable[str], by_job: dict[str, list[Transition]]
) -> None:
    """Create the event of a job tracked outside any task the first time it is heard of."""
    rows = []
    for jid in job_ids:
        first = next((t for t in by_job[jid] if t.is_status and t.name is not None), None)
        rows.append(
            {
                "job_id": jid,
                "task_id": None,
                "job_name": first.name if first else None,
                "status": EventStatus.ENQUEUE.value,
                "params": first.params if first else None,
                "attempt": 0,
                "seq": 0,
                "progress_seq": 0,
                "enqueued_at": utc(by_job[jid][0].at),
                "updated_at": utc(by_job[jid][0].at),
            }
        )
    statement = _dialect_insert(connection, Event).on_conflict_do_nothing(index_elements=["job_id"])
    connection.execute(statement, rows)


def _update_tasks(
    connection: Connection,
    deltas: dict[str, dict[str, int]],
    started: dict[str, datetime],
    touched: set[str],
) -> list[Ended]:
    """Move the ``touched`` tasks' counts; return those that have ended with callbacks or
    children."""
    if not touched:
        return []
    dialect = connection.dialect.name
    # SQLite stores times as text, which the plain statement must be given.
    time: Callable[[datetime | None], Any] = apply_sqlite.to_text if dialect == "sqlite" else (lambda at: at)
    now = time(datetime.now(UTC))
    rows: list[dict[str, Any]] = []
    for task_id in sorted(touched):
        params: dict[str, Any] = {"id": task_id, "started": time(started.get(task_id)), "now": now}
        params.update((f"d_{name}", 0) for name in COUNT_COLUMN.values())
        for status, delta in deltas.get(task_id, {}).items():
            params[f"d_{COUNT_COLUMN[EventStatus(status)]}"] += delta
        rows.append(params)
    if dialect == "postgresql" and len(rows) > 1:
        # A batch of jobs from many tasks (a fair queue takes turns between them): two
        # statements instead of one per task.
        connection.exec_driver_sql(LOCK_TASKS, {"ids": [row["id"] for row in rows]})
        updated = _returned(
            connection, TASKS_UPDATE, {name: [row[name] for row in rows] for name in TASK_ARRAYS}
        )
        return [Ended(row[0], row[2], row[3]) for row in updated if row[1] is not None and (row[2] or row[3])]
    # One task at a time, in id order: the rows are locked in a fixed order.
    ended: list[Ended] = []
    for params in rows:
        for row in _returned(connection, TASK_UPDATE[dialect], params):
            if row[1] is not None and (row[2] or row[3]):
                ended.append(Ended(row[0], row[2], row[3]))
    return ended


class Ended(NamedTuple):
    """A task the batch ended that has callbacks or children: their counts."""

    id: str
    callbacks: int
    children: int


def _returned(connection: Connection, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The rows ``statement`` returns, run on the driver's own cursor in ``connection``'s
    transaction. A task update runs with every settled batch: SQLAlchemy's result for the rows
    it returns costs twice the Python of the update itself, the driver's cursor less than the
    update alone through SQLAlchemy. A driver error is raised as SQLAlchemy's, as callers expect."""
    dbapi = connection.dialect.loaded_dbapi
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(statement, params)
        return list(cursor.fetchall())
    except dbapi.Error as exc:
        raise DBAPIError.instance(statement, params, exc, dbapi.Error) from exc
    finally:
        cursor.close()


def _dialect(connection: Connection) -> _Statements:
    """The module with the statements of the connection's database."""
    if connection.dialect.name == "postgresql":
        return apply_postgres
    if connection.dialect.name == "sqlite":
        return apply_sqlite
    raise NotImplementedError(f"tracking supports SQLite and PostgreSQL, not {connection.dialect.name}")


def _dialect_insert(connection: Connection, model: type[Event] | type[EventMessage]) -> Any:
    """An INSERT that supports ON CONFLICT, which idempotent replays rely on."""
    if connection.dialect.name == "postgresql":
        return postgresql.insert(model)
    if connection.dialect.name == "sqlite":
        return sqlite.insert(model)
    raise NotImplementedError(f"tracking supports SQLite and PostgreSQL, not {connection.dialect.name}")
