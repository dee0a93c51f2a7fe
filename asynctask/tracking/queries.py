"""The read model: a task's progress and errors, its events page by page, a tenant's tasks.

``get_task`` reads one task row by primary key (the counts are columns kept current by every
write) and, when there are any, the first errors through the ``(task_id, status, id)`` index
and their messages: at most three statements, the same for ten events or ten million.
``list_events`` is a keyset range scan of the same index.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    FunctionElement,
    Integer,
    Row,
    Select,
    and_,
    bindparam,
    func,
    or_,
    select,
    union_all,
)
from sqlalchemy.ext.compiler import compiles

from asynctask.db.engine import as_utc
from asynctask.errors import JobNotFound, TaskNotFound
from asynctask.tracking import shown
from asynctask.tracking.cache import FirstErrorsCache
from asynctask.tracking.eta import eta_seconds, read_mark
from asynctask.tracking.models import Event, EventMessage, FailedItem, Task, TaskCallback, TaskParent
from asynctask.tracking.status import TERMINAL, UNDONE, EventStatus, TaskState, TaskStatus
from asynctask.tracking.views import (
    CallbackView,
    ChildView,
    EventView,
    FailedItemView,
    FeedView,
    ItemCounts,
    MessageView,
    Page,
    ParentView,
    TaskView,
)

# Core tables, not ORM entities: the read model returns plain rows turned into views.
_EVENTS = Event.__table__
_TASKS = Task.__table__

#: Largest page ``list_events`` and ``list_tasks`` return.
MAX_PAGE = 1000


def get_task(
    connection: Connection,
    task_id: str,
    *,
    tenant: str | None = None,
    errors: int = 10,
    cache: FirstErrorsCache | None = None,
) -> TaskView:
    """``cache``: where a server answering many polls keeps the first errors a moment."""
    row = _task_row(connection, task_id, tenant)
    first_errors: list[EventView] = []
    if errors > 0 and (row.count_failed or row.count_error or row.count_lost):

        def load() -> list[EventView]:
            chars = shown.chars_read(shown.TASK_BUDGET, errors)
            rows = connection.execute(_first_errors(errors), {"task_id": task_id, "chars": chars}).all()
            return shown.fit(_with_messages(connection, rows, chars), shown.TASK_BUDGET)

        first_errors = cache.get(row, errors, load) if cache is not None else load()
    view = _task_view(row, first_errors)
    if row.callbacks:
        view = replace(view, callbacks=_callbacks_of(connection, task_id))
    if row.hold is not None:
        view = replace(view, parents=_parents_of(connection, task_id))
    if row.children:
        view = replace(view, children=_children_of(connection, task_id))
    return view


#: Children ``get_task`` lists at most.
CHILDREN_SHOWN = 100

_PARENTS_OF = (
    select(TaskParent.parent_id, Task.job_name, TaskParent.ended_at, TaskParent.succeeded)
    .join(Task, Task.id == TaskParent.parent_id)
    .where(TaskParent.child_id == bindparam("task_id"))
    .order_by(TaskParent.position)
)
_CHILDREN_OF = (
    select(TaskParent.child_id, Task.job_name, Task.hold)
    .join(Task, Task.id == TaskParent.child_id)
    .where(TaskParent.parent_id == bindparam("task_id"))
    .order_by(Task.created_at, Task.id)
    .limit(CHILDREN_SHOWN)
)


def _parents_of(connection: Connection, task_id: str) -> tuple[ParentView, ...]:
    rows = connection.execute(_PARENTS_OF, {"task_id": task_id}).all()
    return tuple(ParentView(parent, name, as_utc(at), ok) for parent, name, at, ok in rows)


def _children_of(connection: Connection, task_id: str) -> tuple[ChildView, ...]:
    rows = connection.execute(_CHILDREN_OF, {"task_id": task_id}).all()
    return tuple(ChildView(child, name, hold or "") for child, name, hold in rows)


_CALLBACKS_OF = (
    select(
        TaskCallback.kind, TaskCallback.job_name, TaskCallback.jid, TaskCallback.state, TaskCallback.fired_at
    )
    .where(TaskCallback.task_id == bindparam("task_id"))
    .order_by(TaskCallback.id)
)


def _callbacks_of(connection: Connection, task_id: str) -> tuple[CallbackView, ...]:
    rows = connection.execute(_CALLBACKS_OF, {"task_id": task_id}).all()
    return tuple(CallbackView(kind, name, jid, state, as_utc(at)) for kind, name, jid, state, at in rows)


#: A tenant's earlier tasks a place reads at most: a poll must not read a tenant's whole history.
EARLIER_TASKS = 1000


def _earlier_waiting() -> Select[Any]:
    earlier = (
        select(Task.count_enqueue, Task.queue)
        .where(
            Task.tenant == bindparam("tenant"),
            or_(
                Task.created_at < bindparam("created_at"),
                and_(Task.created_at == bindparam("created_at"), Task.id < bindparam("id")),
            ),
        )
        .order_by(Task.created_at.desc(), Task.id.desc())
        .limit(EARLIER_TASKS)
        .subquery()
    )
    # The queue is filtered after the limit: the index orders a tenant's tasks, not its queues'.
    return select(func.coalesce(func.sum(earlier.c.count_enqueue), 0)).where(
        earlier.c.queue == bindparam("queue")
    )


#: Built once, as the task reads are: a status poll of a waiting task runs it, and building it
#: cost more than running it.
_EARLIER_WAITING = _earlier_waiting()


def earlier_waiting(connection: Connection, view: TaskView) -> int:
    """Jobs of the tenant's tasks created before ``view``'s in its queue that have not started:
    in a fair queue they run before the task's, in the tenant's turns (0 without a tenant). The
    tenant's last ``EARLIER_TASKS`` tasks are read, newest first, by the tenant's index."""
    if view.tenant is None:
        return 0
    params = {"tenant": view.tenant, "created_at": view.created_at, "id": view.id, "queue": view.queue}
    return int(connection.execute(_EARLIER_WAITING, params).scalar_one())


@functools.lru_cache(maxsize=128)
def _first_errors(limit: int) -> Select[Any]:
    """The first ``limit`` failed or error events in one statement: the lowest ids of each
    status (two short range scans of the ``(task_id, status, id)`` index), merged."""
    firsts = [
        select(_EVENTS)
        .where(Event.task_id == bindparam("task_id"), Event.status == status.value)
        .order_by(Event.id)
        .limit(limit)
        .subquery()
        for status in UNDONE
    ]
    merged = union_all(*(select(first) for first in firsts)).subquery()
    return select(*_shown_columns(merged)).order_by(merged.c.id).limit(limit)


def _shown_columns(table: Any) -> list[Any]:
    """The columns of events (``table``), the error only as far as a read shows it: its first
    ``chars`` characters (a bound parameter), and its size in bytes."""
    columns: list[Any] = []
    for column in table.c:
        if column.name == "error":
            columns += (_head(column).label("error"), octets(column).label("error_bytes"))
        else:
            columns.append(column)
    return columns


def _head(text: Any) -> Any:
    return func.substr(text, 1, bindparam("chars"))


class octets(FunctionElement[int]):
    """The size of a text in bytes: PostgreSQL's ``octet_length``, SQLite's length of its bytes."""

    type = Integer()
    inherit_cache = True
    name = "octets"


@compiles(octets)
def _octets(element: octets, compiler: Any, **kw: Any) -> str:
    return f"octet_length({compiler.process(element.clauses, **kw)})"


@compiles(octets, "sqlite")
def _octets_sqlite(element: octets, compiler: Any, **kw: Any) -> str:
    return f"length(CAST({compiler.process(element.clauses, **kw)} AS BLOB))"


def list_events(
    connection: Connection,
    task_id: str,
    *,
    status: str | None = None,
    after: str | int | None = None,
    limit: int = 100,
    tenant: str | None = None,
    messages: bool = True,
) -> Page[EventView]:
    _task_row(connection, task_id, tenant)
    limit = _page_size(limit)
    conditions = [Event.task_id == task_id]
    if status is not None:
        conditions.append(Event.status == EventStatus(status).value)
    if after is not None:
        conditions.append(Event.id > _event_cursor(after))
    chars = shown.chars_read(shown.PAGE_BUDGET, limit)
    rows = connection.execute(
        select(*_shown_columns(_EVENTS)).where(*conditions).order_by(Event.id).limit(limit + 1),
        {"chars": chars},
    ).all()
    more = len(rows) > limit
    rows = rows[:limit]
    events = _with_messages(connection, rows, chars) if messages else [_event_view(r, ()) for r in rows]
    return Page(tuple(shown.fit(events, shown.PAGE_BUDGET)), str(rows[-1].id) if more and rows else None)


def list_failed_items(
    connection: Connection,
    task_id: str,
    *,
    after: str | int | None = None,
    limit: int = 100,
    tenant: str | None = None,
) -> Page[FailedItemView]:
    """The items that failed in the task's jobs (``asynctask.each``), in the task's order of
    items (its jobs' order, then the place in each chunk); each message read as far as a
    page's budget allows. ``after``: the previous page's ``next_cursor``."""
    _task_row(connection, task_id, tenant)
    limit = _page_size(limit)
    query = (
        select(
            FailedItem.id,
            FailedItem.event_id,
            Event.job_id,
            FailedItem.position,
            FailedItem.item,
            _head(FailedItem.message).label("message"),
            octets(FailedItem.message).label("size"),
            FailedItem.at,
        )
        .join(Event, Event.id == FailedItem.event_id)
        .where(FailedItem.task_id == task_id)
    )
    if after is not None:
        event_id, position = _item_cursor(after)
        query = query.where(
            or_(
                FailedItem.event_id > event_id,
                and_(FailedItem.event_id == event_id, FailedItem.position > position),
            )
        )
    chars = shown.chars_read(shown.PAGE_BUDGET, limit)
    ordered = query.order_by(FailedItem.event_id, FailedItem.position).limit(limit + 1)
    rows = connection.execute(ordered, {"chars": chars}).all()
    more = len(rows) > limit
    rows = rows[:limit]
    views = tuple(
        FailedItemView(
            id=r.id,
            job_id=r.job_id,
            position=r.position,
            item=r.item,
            message=shown.read(r.message, r.size),
            at=as_utc(r.at) or r.at,
        )
        for r in rows
    )
    return Page(views, f"{rows[-1].event_id}-{rows[-1].position}" if more and rows else None)


#: Largest place of an item in its chunk (a 32-bit column).
MAX_POSITION = 2**31 - 1


def _item_cursor(after: str | int) -> tuple[int, int]:
    """A failed items cursor: the last item's event id and place, as ``"<event>-<place>"``."""
    event, dash, position = str(after).partition("-")
    if not dash:
        raise ValueError(f"invalid items cursor {after!r}")
    place = _event_cursor(position)
    if place > MAX_POSITION:
        raise ValueError(f"invalid items cursor {after!r}")
    return _event_cursor(event), place


def failed_since(connection: Connection, since: datetime) -> int:
    """Jobs that ended ``failed`` (raised ``JobFailed``) in the tasks created since ``since``:
    their counts summed, a range of the tasks' creation index and no event read."""
    query = select(func.coalesce(func.sum(Task.count_failed), 0)).where(Task.created_at >= since)
    return int(connection.execute(query).scalar_one())


def event_params(connection: Connection, task_id: str, job_id: str) -> list[Any] | None:
    """The arguments of the task's job ``job_id``, whole, where a page of events may show them
    cut. Raises JobNotFound when the task has no such job."""
    if "\x00" in task_id or "\x00" in job_id:
        # No id holds NUL, and PostgreSQL refuses it in a parameter.
        raise JobNotFound(job_id)
    query = select(Event.params).where(Event.job_id == job_id, Event.task_id == task_id)
    row = connection.execute(query).first()
    if row is None:
        raise JobNotFound(job_id)
    params: list[Any] | None = row.params
    return params


def list_tasks(
    connection: Connection,
    tenant: str | None,
    *,
    before: str | None = None,
    limit: int = 50,
    every_tenant: bool = False,
) -> Page[TaskView]:
    """A tenant's tasks, newest first (``tenant=None``: tasks created without a tenant), or
    with ``every_tenant`` all tasks whoever created them (for operators)."""
    limit = _page_size(limit)
    query = select(_TASKS)
    if not every_tenant:
        query = query.where(Task.tenant.is_(None) if tenant is None else Task.tenant == tenant)
    if before is not None:
        created, task_id = _task_cursor(before)
        query = query.where(
            or_(Task.created_at < created, and_(Task.created_at == created, Task.id < task_id))
        )
    rows = connection.execute(query.order_by(Task.created_at.desc(), Task.id.desc()).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    views = tuple(_task_view(r, []) for r in rows)
    cursor = None
    if more and rows:
        last = rows[-1]
        cursor = f"{_stored_time(last.created_at)}|{last.id}"
    return Page(views, cursor)


_TASK_BY_ID = select(_TASKS).where(Task.id == bindparam("task_id"))
_TASK_BY_ID_AND_TENANT = _TASK_BY_ID.where(Task.tenant == bindparam("tenant"))


def _task_row(connection: Connection, task_id: str, tenant: str | None) -> Row[Any]:
    if "\x00" in task_id:
        # No id holds NUL, and PostgreSQL refuses it in a parameter.
        raise TaskNotFound(task_id)
    # Statements built once: status polls are the hot path, and building a select() costs
    # about as much as running it.
    if tenant is None:
        row = connection.execute(_TASK_BY_ID, {"task_id": task_id}).first()
    else:
        row = connection.execute(_TASK_BY_ID_AND_TENANT, {"task_id": task_id, "tenant": tenant}).first()
    if row is None:
        raise TaskNotFound(task_id)
    return row


def _task_view(row: Row[Any], errors: Sequence[EventView]) -> TaskView:
    r = row._mapping
    counts = {status.value: int(r[f"count_{status.value}"]) for status in EventStatus}
    done = sum(counts[s.value] for s in TERMINAL)
    total = int(r["total"])
    items = ItemCounts(int(r["items"]), int(r["items_done"]), int(r["items_failed"]))
    status = _status(r["state"], counts, done, total, r["started_at"], items.failed)
    started = as_utc(r["started_at"])
    feed = _feed_view(r["feed"], status)
    eta = None
    # Stopped jobs are among those remaining, but when they are all that remains nothing runs
    # until a resume, as in a paused task: there is no time left to tell.
    remaining = total - done
    if (
        status == TaskStatus.RUNNING
        and remaining > counts[EventStatus.STOPPED.value]
        and not (feed is not None and feed.paused)
    ):
        eta = eta_seconds(
            remaining=remaining,
            ended=sum(counts[s.value] for s in _ENDED),
            started_at=started,
            now=datetime.now(UTC),
            mark=read_mark(r["feed"]),
            fresh=feed.parallel if feed is not None else 1,
        )
    return TaskView(
        id=r["id"],
        job_name=r["job_name"],
        queue=r["queue"],
        tenant=r["tenant"],
        meta=r["meta"],
        status=status.value,
        total=total,
        counts=counts,
        done=done,
        progress=_progress(done, total, items),
        created_at=as_utc(r["created_at"]) or datetime.now(UTC),
        started_at=started,
        finished_at=as_utc(r["finished_at"]),
        cancelled_at=as_utc(r["cancelled_at"]),
        eta_seconds=eta,
        feed=feed,
        errors=tuple(errors),
        items=items,
        runtime=r["runtime"],
        run_if=r["run_if"],
        hold=r["hold"],
        cancel_reason=r["cancel_reason"],
        children_count=int(r["children"]),
    )


def _progress(done: int, total: int, items: ItemCounts) -> float:
    """Items run out of the task's items once its jobs run items one by one, else jobs done."""
    if not total or done >= total:
        return 1.0
    ran = items.done + items.failed
    if ran and items.total:
        return round(min(ran / items.total, 1.0), 6)
    return round(done / total, 6)


#: Jobs that ran to their end: the rate of these is the task's pace (cancelled ones never ran,
#: stopped ones have not ended).
_ENDED = (EventStatus.FINISH, EventStatus.FAILED, EventStatus.ERROR)
#: A task in one of these holds no job back: its feed released them all or dropped them.
_OVER = {TaskStatus.FINISHED, TaskStatus.FINISHED_WITH_ERRORS, TaskStatus.CANCELLED, TaskStatus.ABORTED}


def _feed_view(stored: Any, status: TaskStatus) -> FeedView | None:
    """The feed settings stored on the task row. ``held`` is the broker's to say (the service
    asks it, ``tasks.feedview``); this module knows only that an ended task holds nothing."""
    if not isinstance(stored, dict):
        return None
    return FeedView(
        parallel=int(stored["parallel"]),
        interval=float(stored["interval"]),
        priority=int(stored["priority"]),
        paused=bool(stored["paused"]),
        held=0 if status in _OVER else None,
    )


def _status(
    state: str, counts: dict[str, int], done: int, total: int, started: datetime | None, items_failed: int
) -> TaskStatus:
    if state == TaskState.CREATING:
        return TaskStatus.CREATING
    if state == TaskState.ABORTED:
        return TaskStatus.ABORTED
    if state == TaskState.CANCELLED:
        return TaskStatus.CANCELLED
    if done >= total:
        bad = sum(counts[status.value] for status in UNDONE) + items_failed
        return TaskStatus.FINISHED_WITH_ERRORS if bad else TaskStatus.FINISHED
    # A stopped job (even one stopped before it started) makes the task running: it was acted
    # on, and it runs again only when resumed, not in its turn in the queue.
    active = counts[EventStatus.WORKING.value] + counts[EventStatus.STOPPED.value]
    if started is None and done == 0 and active == 0:
        return TaskStatus.PENDING
    return TaskStatus.RUNNING


_NUMBERED = (
    select(
        EventMessage.event_id,
        EventMessage.at,
        EventMessage.status,
        _head(EventMessage.text).label("text"),
        octets(EventMessage.text).label("size"),
        func.row_number()
        .over(partition_by=EventMessage.event_id, order_by=EventMessage.seq.desc())
        .label("from_last"),
        func.count().over(partition_by=EventMessage.event_id).label("total"),
    )
    .where(EventMessage.event_id.in_(bindparam("ids", expanding=True)))
    .subquery()
)
#: The latest ``MESSAGES_SHOWN`` messages of each event, oldest first, with how many it has.
_MESSAGES = (
    select(
        _NUMBERED.c.event_id,
        _NUMBERED.c.at,
        _NUMBERED.c.status,
        _NUMBERED.c.text,
        _NUMBERED.c.size,
        _NUMBERED.c.total,
    )
    .where(_NUMBERED.c.from_last <= shown.MESSAGES_SHOWN)
    .order_by(_NUMBERED.c.event_id, _NUMBERED.c.from_last.desc())
)


def _with_messages(connection: Connection, rows: Sequence[Row[Any]], chars: int) -> list[EventView]:
    if not rows:
        return []
    by_event: dict[int, list[MessageView]] = defaultdict(list)
    totals: dict[int, int] = {}
    for m in connection.execute(_MESSAGES, {"ids": [r.id for r in rows], "chars": chars}):
        by_event[m.event_id].append(MessageView(as_utc(m.at) or m.at, m.status, shown.read(m.text, m.size)))
        totals[m.event_id] = m.total
    return [
        _event_view(r, tuple(by_event.get(r.id, ())), totals.get(r.id, 0) - len(by_event.get(r.id, ())))
        for r in rows
    ]


def _event_view(row: Row[Any], messages: tuple[MessageView, ...], earlier: int = 0) -> EventView:
    r = row._mapping
    return EventView(
        id=r["id"],
        job_id=r["job_id"],
        task_id=r["task_id"],
        job_name=r["job_name"],
        status=r["status"],
        params=r["params"],
        attempt=r["attempt"],
        error=None if r["error"] is None else shown.read(r["error"], r["error_bytes"]),
        error_class=r["error_class"],
        progress_done=r["progress_done"],
        progress_total=r["progress_total"],
        enqueued_at=as_utc(r["enqueued_at"]),
        started_at=as_utc(r["started_at"]),
        finished_at=as_utc(r["finished_at"]),
        updated_at=as_utc(r["updated_at"]),
        messages=messages,
        earlier_messages=earlier,
        items_done=r["items_done"],
        items_failed=r["items_failed"],
    )


def _page_size(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE}")
    return limit


#: Largest event id (a signed 64-bit integer in SQL).
MAX_EVENT_ID = 2**63 - 1


def _event_cursor(after: str | int) -> int:
    if isinstance(after, str) and not (after.isascii() and after.isdigit()):
        raise ValueError(f"invalid events cursor {after!r}")
    try:
        value = int(after)
    except (TypeError, ValueError):
        raise ValueError(f"invalid events cursor {after!r}") from None
    if not 0 <= value <= MAX_EVENT_ID:
        raise ValueError(f"invalid events cursor {after!r}")
    return value


def _stored_time(value: datetime) -> str:
    return (as_utc(value) or value).isoformat()


def _task_cursor(before: str) -> tuple[datetime, str]:
    created, _, task_id = before.partition("|")
    try:
        when = datetime.fromisoformat(created)
    except ValueError:
        raise ValueError(f"invalid tasks cursor {before!r}") from None
    if not task_id or "\x00" in task_id:
        raise ValueError(f"invalid tasks cursor {before!r}")
    return when, task_id
