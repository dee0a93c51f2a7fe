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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, case, select, update
from sqlalchemy.dialects import postgresql, sqlite

from asynctask.tracking import apply_postgres
from asynctask.tracking.database import as_utc
from asynctask.tracking.models import Event, EventMessage, Task
from asynctask.tracking.status import EventStatus, TaskState
from asynctask.tracking.transitions import LOG, PROGRESS, Transition

#: Job ids per SELECT ... IN (...), well under SQLite's bound-parameter limit.
LOOKUP_CHUNK = 2000

COUNT_COLUMN = {status: f"count_{status.value}" for status in EventStatus}


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


def apply_transitions(connection: Connection, batch: Sequence[Transition]) -> int:
    """Apply ``batch`` (any order) inside the caller's transaction; return events changed."""
    by_job: dict[str, list[Transition]] = defaultdict(list)
    for transition in sorted(batch, key=lambda t: t.seq):
        by_job[transition.jid].append(transition)
    if not by_job:
        return 0
    states = _load(connection, sorted(by_job))
    missing = [jid for jid in sorted(by_job) if jid not in states]
    if missing:
        _insert_standalone(connection, missing, by_job)
        states.update(_load(connection, missing))
    messages: list[dict[str, Any]] = []
    deltas: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    started: dict[str, datetime] = {}
    for jid, transitions in by_job.items():
        state = states[jid]
        before = state.status
        for transition in transitions:
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
    if connection.dialect.name == "postgresql":
        apply_postgres.update_events(
            connection, changes, apply_postgres.insert_messages(connection, messages)
        )
    else:
        _update_events(connection, changes, _insert_messages(connection, messages))
    _update_tasks(connection, deltas, started, touched={s.task_id for s in states.values() if s.task_id})
    return len(changes)


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
            state.progress_seq = t.seq
            state.started_at = at
            changes.update(
                started_at=at,
                finished_at=None,
                progress_done=None,
                progress_total=None,
                progress_seq=t.seq,
            )
        elif t.kind == EventStatus.ENQUEUE:
            changes.update(enqueued_at=at, finished_at=None)
        else:
            changes["finished_at"] = at
        if t.kind in (EventStatus.FAILED, EventStatus.ERROR):
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
    states: dict[str, _EventState] = {}
    columns = (
        Event.job_id,
        Event.id,
        Event.task_id,
        Event.status,
        Event.seq,
        Event.progress_seq,
        Event.started_at,
    )
    rows: list[Any] = []
    if connection.dialect.name == "postgresql":
        rows = apply_postgres.load(connection, job_ids)
    else:
        for start in range(0, len(job_ids), LOOKUP_CHUNK):
            chunk = job_ids[start : start + LOOKUP_CHUNK]
            rows += connection.execute(select(*columns).where(Event.job_id.in_(chunk)))
    for row in rows:
        states[row.job_id] = _EventState(
            row.id, row.task_id, row.status, row.seq, row.progress_seq, as_utc(row.started_at)
        )
    return states


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


def _update_events(
    connection: Connection, changes: dict[int, dict[str, Any]], starts: dict[int, int]
) -> None:
    """One executemany per set of changed columns (most batches have two or three shapes).

    An event's attempt grows by the starts counted from the messages actually inserted, so
    replays and batches applied out of order count each start once.
    """
    by_shape: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
    for event_id in changes.keys() | starts.keys():
        row = {"b_id": event_id, **changes.get(event_id, {}), "b_starts": starts.get(event_id, 0)}
        by_shape[tuple(sorted(k for k in row if k not in ("b_id", "b_starts")))].append(row)
    for shape, rows in by_shape.items():
        statement = (
            update(Event)
            .where(Event.id == bindparam("b_id"))
            .values(
                {
                    **{name: bindparam(name) for name in shape},
                    "attempt": Event.attempt + bindparam("b_starts"),
                }
            )
            .execution_options(synchronize_session=False)
        )
        connection.execute(statement, rows)


def _insert_messages(connection: Connection, messages: list[dict[str, Any]]) -> dict[int, int]:
    """Insert the messages not stored yet; return how many starts each event gained."""
    if not messages:
        return {}
    statement = (
        _dialect_insert(connection, EventMessage)
        .on_conflict_do_nothing(index_elements=["event_id", "seq"])
        .returning(EventMessage.event_id, EventMessage.seq)
    )
    start_keys = {(m["event_id"], m["seq"]) for m in messages if m.pop("starts")}
    starts: dict[int, int] = defaultdict(int)
    for row in connection.execute(statement, messages):
        if (row.event_id, row.seq) in start_keys:
            starts[row.event_id] += 1
    return starts


def _update_tasks(
    connection: Connection,
    deltas: dict[str, dict[str, int]],
    started: dict[str, datetime],
    touched: set[str],
) -> None:
    now = datetime.now(UTC)
    for task_id in sorted(touched):
        values: dict[str, Any] = {
            # Any transition of a task's job proves its jobs were pushed: a task left in
            # "creating" (or "aborted", if Redis ran the push but its reply was lost) by a
            # create_task that failed after the push is healed here.
            "state": case(
                (Task.state.in_([TaskState.CREATING.value, TaskState.ABORTED.value]), TaskState.READY.value),
                else_=Task.state,
            )
        }
        for status, delta in deltas.get(task_id, {}).items():
            if delta:
                column = getattr(Task, COUNT_COLUMN[EventStatus(status)])
                values[COUNT_COLUMN[EventStatus(status)]] = column + delta
        if task_id in started:
            values["started_at"] = case((Task.started_at.is_(None), started[task_id]), else_=Task.started_at)
        connection.execute(update(Task).where(Task.id == task_id).values(values))
    if touched:
        waiting = Task.count_enqueue + Task.count_working
        connection.execute(
            update(Task)
            .where(Task.id.in_(sorted(touched)))
            .values(
                finished_at=case(
                    (waiting == 0, case((Task.finished_at.is_(None), now), else_=Task.finished_at)),
                    else_=None,
                )
            )
        )


def _dialect_insert(connection: Connection, model: type[Event] | type[EventMessage]) -> Any:
    """An INSERT that supports ON CONFLICT, which idempotent replays rely on."""
    if connection.dialect.name == "postgresql":
        return postgresql.insert(model)
    if connection.dialect.name == "sqlite":
        return sqlite.insert(model)
    raise NotImplementedError(f"tracking supports SQLite and PostgreSQL, not {connection.dialect.name}")
