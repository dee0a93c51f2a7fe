"""A task's callbacks: jobs pushed once when the task ends, with its summary.

``create_task(..., on_complete=job, on_success=job, on_failure=job)`` writes one
``TaskCallback`` row per kind with the task, ``waiting``. The statement that ends a task (the
last of its jobs settled, or it was cancelled with nothing running) is followed, in the same
transaction, by ``fire``: each waiting callback whose kind applies gets its payload, the task's
summary first among its args, and turns ``due``. Because the task's row is locked by that
statement, two transactions that both see the task end fire each callback once between them.

A kind fires at most once: the first time the task ends while it applies. ``complete`` applies
to every end, ``success`` to an end with no failed, error, lost or cancelled job and no failed
item, ``failure`` to the others. A task ended with errors whose failures ``retry_task`` runs
again may end once more: its ``success`` callback then fires if it applies, as Sidekiq's batch
callbacks do.

A due callback is pushed by its broker (``CallbackPusher``), which then marks it ``pushed``. One
whose job another runtime runs (a Celery task, say) is sent through that runtime's client instead,
by a process that knows the job (``tasks.runtime_callbacks``); the brokers leave it alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, insert, select, update

from asynctask import payload
from asynctask.tracking import queries
from asynctask.tracking.models import TaskCallback
from asynctask.tracking.status import TaskStatus

KINDS = ("complete", "success", "failure")
WAITING, DUE, PUSHED = "waiting", "due", "pushed"
#: First errors a callback's summary carries.
SUMMARY_ERRORS = 5
#: Due callbacks one pass of a pusher takes.
PUSH_BATCH = 100


@dataclass(frozen=True)
class Callback:
    """A callback as ``create_task`` records it: its kind and its job's payload, args aside."""

    kind: str
    job_name: str
    head: Mapping[str, Any]
    args: Sequence[Any]
    #: The runtime that runs the job; None for AsyncTask's own.
    runtime: str | None = None


@dataclass(frozen=True, order=True)
class DueCallback:
    id: int
    task_id: str
    jid: str
    queue: str
    payload: str


class CallbackPusher(Protocol):
    """What a broker offers to push due callbacks."""

    def push_due(self, engine: Engine, ids: Sequence[int] | None = None) -> int:
        """Push the due callbacks ``ids`` (None: any left due), each once; return how many."""
        ...


def record(connection: Connection, task_id: str, callbacks: Sequence[Callback]) -> None:
    """Write a new task's callbacks, waiting, in the task's transaction."""
    if not callbacks:
        return
    connection.execute(
        insert(TaskCallback),
        [
            {
                "task_id": task_id,
                "kind": callback.kind,
                "job_name": callback.job_name,
                "jid": str(callback.head["jid"]),
                "head": dict(callback.head),
                "args": list(callback.args),
                "runtime": callback.runtime,
                "state": WAITING,
            }
            for callback in callbacks
        ],
    )


def applies(kind: str, status: str) -> bool:
    """Whether a callback of ``kind`` fires for a task that ended ``status``."""
    if kind == "complete":
        return True
    return (status == TaskStatus.FINISHED) == (kind == "success")


def fire(connection: Connection, ended: Sequence[str]) -> list[int]:
    """Make due the waiting callbacks that apply of the tasks ``ended`` (their rows locked by
    the caller's transaction); return their ids."""
    if not ended:
        return []
    rows = connection.execute(
        select(TaskCallback.id, TaskCallback.task_id, TaskCallback.kind, TaskCallback.head, TaskCallback.args)
        .where(TaskCallback.task_id.in_(sorted(ended)), TaskCallback.state == WAITING)
        .order_by(TaskCallback.id)
    ).all()
    summaries: dict[str, dict[str, Any]] = {}
    now = datetime.now(UTC)
    fired: list[int] = []
    for callback_id, task_id, kind, head, args in rows:
        if task_id not in summaries:
            summaries[task_id] = summary(connection, task_id)
        found = summaries[task_id]
        if not applies(kind, found["status"]):
            continue
        job = {**head, "args": [found, *args], "enqueued_at": now.timestamp()}
        connection.execute(
            update(TaskCallback)
            .where(TaskCallback.id == callback_id, TaskCallback.state == WAITING)
            .values(state=DUE, payload=payload.dumps_storable(job), fired_at=now)
        )
        fired.append(callback_id)
    return fired


def summary(connection: Connection, task_id: str) -> dict[str, Any]:
    """What a callback job gets first: the task as it ended."""
    view = queries.get_task(connection, task_id, errors=SUMMARY_ERRORS)
    return {
        "task_id": view.id,
        "job": view.job_name,
        "status": view.status,
        "total": view.total,
        "counts": dict(view.counts),
        "items": {"total": view.items.total, "done": view.items.done, "failed": view.items.failed},
        "meta": view.meta,
        "first_errors": [
            {"job_id": e.job_id, "status": e.status, "error_class": e.error_class, "error": e.error}
            for e in view.errors
        ],
        "finished_at": view.finished_at.timestamp() if view.finished_at is not None else None,
    }


def due(connection: Connection, ids: Sequence[int] | None, limit: int = PUSH_BATCH) -> list[DueCallback]:
    """Due callbacks that AsyncTask runs, oldest first: those of ``ids``, or any."""
    query = select(
        TaskCallback.id, TaskCallback.task_id, TaskCallback.jid, TaskCallback.head, TaskCallback.payload
    ).where(TaskCallback.state == DUE, TaskCallback.runtime.is_(None))
    if ids is not None:
        query = query.where(TaskCallback.id.in_(list(ids)))
    return [_due(row) for row in connection.execute(query.order_by(TaskCallback.id).limit(limit)).all()]


def take(
    connection: Connection,
    ids: Sequence[int] | None,
    limit: int = PUSH_BATCH,
    elsewhere: Sequence[str] | None = None,
) -> list[DueCallback]:
    """Mark pushed, and return, due callbacks (those of ``ids``, or any), for a push in the
    caller's transaction: a concurrent transaction that took one first leaves it out (its
    row's lock is waited for, and the state read again). Those AsyncTask runs, or with
    ``elsewhere`` those of these names that another runtime runs."""
    chosen = select(TaskCallback.id).where(TaskCallback.state == DUE)
    if elsewhere is None:
        chosen = chosen.where(TaskCallback.runtime.is_(None))
    else:
        chosen = chosen.where(TaskCallback.runtime.is_not(None), TaskCallback.job_name.in_(list(elsewhere)))
    if ids is not None:
        chosen = chosen.where(TaskCallback.id.in_(list(ids)))
    taken = connection.execute(
        update(TaskCallback)
        .where(TaskCallback.id.in_(chosen.order_by(TaskCallback.id).limit(limit).scalar_subquery()))
        .where(TaskCallback.state == DUE)
        .values(state=PUSHED, pushed_at=datetime.now(UTC))
        .returning(
            TaskCallback.id, TaskCallback.task_id, TaskCallback.jid, TaskCallback.head, TaskCallback.payload
        )
    ).all()
    return sorted(_due(rows) for rows in taken)


def _due(row: Any) -> DueCallback:
    callback_id, task_id, jid, head, text = row
    return DueCallback(callback_id, task_id, jid, str(head["queue"]), text or "")


def mark_pushed(connection: Connection, ids: Sequence[int]) -> None:
    if ids:
        connection.execute(
            update(TaskCallback)
            .where(TaskCallback.id.in_(list(ids)), TaskCallback.state == DUE)
            .values(state=PUSHED, pushed_at=datetime.now(UTC))
        )
