"""Jobs that running jobs add to their own task (``current_job().task.add``): their rows.

Each batch of an ``add`` call is one ``TaskAddition`` row, written in the transaction that writes
the batch's events and grows the task's counts. The row is keyed by the call (the adding job,
the checkpoint it had reached, the call's place since): a job that runs again and makes the
same call finds it done. Where the broker cannot join that transaction (Redis) the row holds the
jobs' payloads, ``due``, until its push marks it ``pushed`` (``AdditionPusher``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, insert, select, update

from asynctask.tracking.models import Task, TaskAddition

DUE, PUSHED = "due", "pushed"
#: Due additions one pass of a pusher takes.
PUSH_BATCH = 20


@dataclass(frozen=True, order=True)
class DueAddition:
    id: int
    task_id: str
    jids: tuple[str, ...]
    queue: str
    share: str | None
    payloads: tuple[str, ...]
    #: The task's feed settings (``Feed.as_dict``) when the jobs join its feed, else None.
    feed: dict[str, Any] | None = None


class AdditionPusher(Protocol):
    """What a broker whose jobs do not commit with SQL offers to push due additions."""

    def push_due(self, engine: Engine, ids: Sequence[int] | None = None) -> int:
        """Push the jobs of the due additions ``ids`` (None: any left due), each addition once;
        return how many additions."""
        ...


def record(
    connection: Connection,
    task_id: str,
    call: str,
    part: int,
    queue: str,
    share: str | None,
    jids: Sequence[str],
    payloads: Sequence[str] | None,
    fed: bool = False,
) -> int:
    """Write one batch of a call, in the transaction of its events; return its id. ``payloads``:
    the jobs to push once it committed (None: they commit with it); ``fed``: into the task's
    feed. IntegrityError if the same call's batch exists (another run of the job made the call
    first)."""
    return int(
        connection.execute(
            insert(TaskAddition)
            .values(
                task_id=task_id,
                call=call,
                part=part,
                jids=list(jids),
                queue=queue,
                share=share,
                fed=fed,
                payloads=None if payloads is None else "\n".join(payloads),
                state=PUSHED if payloads is None else DUE,
                created_at=datetime.now(UTC),
            )
            .returning(TaskAddition.id)
        ).scalar_one()
    )


def made(connection: Connection, call: str) -> tuple[list[str], list[int]] | None:
    """What an earlier run of the job added in ``call``: the jobs' ids, and the additions still
    due; None if it made no such call."""
    rows = connection.execute(
        select(TaskAddition.id, TaskAddition.jids, TaskAddition.state)
        .where(TaskAddition.call == call)
        .order_by(TaskAddition.part)
    ).all()
    if not rows:
        return None
    return [str(jid) for row in rows for jid in row.jids], [row.id for row in rows if row.state == DUE]


def due(connection: Connection, ids: Sequence[int] | None, limit: int = PUSH_BATCH) -> list[DueAddition]:
    """Due additions, oldest first: those of ``ids``, or any."""
    query = (
        select(
            TaskAddition.id,
            TaskAddition.task_id,
            TaskAddition.jids,
            TaskAddition.queue,
            TaskAddition.share,
            TaskAddition.payloads,
            TaskAddition.fed,
            Task.feed,
        )
        .join(Task, Task.id == TaskAddition.task_id)
        .where(TaskAddition.state == DUE)
    )
    if ids is not None:
        query = query.where(TaskAddition.id.in_(list(ids)))
    return [
        DueAddition(
            id_,
            task_id,
            tuple(jids),
            queue,
            share,
            tuple((payloads or "").split("\n")),
            feed if fed else None,
        )
        for id_, task_id, jids, queue, share, payloads, fed, feed in connection.execute(
            query.order_by(TaskAddition.id).limit(limit)
        ).all()
    ]


def mark_pushed(connection: Connection, ids: Sequence[int]) -> None:
    """The additions' jobs are pushed: their payloads are no longer needed."""
    if ids:
        connection.execute(
            update(TaskAddition)
            .where(TaskAddition.id.in_(list(ids)), TaskAddition.state == DUE)
            .values(state=PUSHED, payloads=None, pushed_at=datetime.now(UTC))
        )
