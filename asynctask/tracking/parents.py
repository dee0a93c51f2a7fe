"""Tasks that wait for other tasks: ``create_task(..., after=[task_id, ...], run_if=...)``.

A task with parents is created at once, its events ``enqueue`` "waiting for task ...", and its
jobs held by a paused feed (``asynctask.feeds``): no poller looks at it. ``link`` writes one
``TaskParent`` row per parent in the child's creation transaction, after it locked the parents'
rows (each gains a child), so a parent that ends meanwhile either is seen ended or sees the link.

The statement that ends a parent (the last of its jobs settled, or it was cancelled with nothing
running) is followed, in the same transaction, by ``settle``: each of its links still open is
marked ended, once, and each child's count of parents left falls by one. The children's rows are
locked by that update (in id order), so two parents that end at once are counted one after the
other. Then:
- a parent that did not succeed, for a child that runs only if every parent succeeded
  (``run_if="success"``, the default): the child ends ``cancelled`` there and then, its
  ``cancel_reason`` naming the parent, and its own children and callbacks follow as for any end;
- no parent left: the child's hold turns ``releasing``.
The broker then resumes or drops the child's feed (its ``HoldReleaser``; the SQL broker in the
same transaction, turning ``dropping`` to ``dropped`` in it): both are harmless twice, so a
process that dies before it marks the hold ``released`` or ``dropped`` leaves it for the next
look (the Redis flusher's and the SQL broker's sweeps).

A link is decided by the parent's first end: a parent whose failures ``retry_task`` runs again
later changes nothing for a child already released or cancelled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from sqlalchemy import Connection, Engine, insert, select, update

from asynctask.errors import TaskNotFound
from asynctask.tracking.models import Event, Task, TaskParent
from asynctask.tracking.status import EventStatus, TaskState, TaskStatus

logger = logging.getLogger("asynctask.tracking")

WAITING, RELEASING, RELEASED, DROPPING, DROPPED = "waiting", "releasing", "released", "dropping", "dropped"
#: Holds a process left to act on, looked at together.
DUE_HOLDS = (RELEASING, DROPPING)
#: Holds one pass of a ``HoldReleaser`` acts on.
RELEASE_BATCH = 1000


class UnknownParent(TaskNotFound):
    """A task named in ``after`` does not exist (for this tenant, when one is given)."""


class Linked(NamedTuple):
    """A new child's links: how many parents have not ended, and why it is to be cancelled at
    once (a parent ended without succeeding, and it runs only if all succeed), else None."""

    left: int
    cancel_reason: str | None

    @property
    def settled(self) -> bool:
        """Whether its parents' ends decided its fate already: its creator acts on its hold."""
        return self.left == 0 or self.cancel_reason is not None


class HoldReleaser(Protocol):
    """What a broker offers to release or drop the held jobs of tasks whose holds are due."""

    def release_due(self, engine: Engine, ids: Sequence[str] | None = None) -> int:
        """Act on the due holds of tasks ``ids`` (None: any a process left due); return how
        many. A task still being created whose jobs the broker does not hold yet is left to its
        creator, which acts once it has published them."""
        ...


_ENDED_COLUMNS = (
    Task.id,
    Task.state,
    Task.finished_at,
    Task.count_failed,
    Task.count_error,
    Task.count_lost,
    Task.count_cancelled,
    Task.items_failed,
)


def succeeded(row: Any) -> bool:
    """Whether an ended task (a row of ``_ENDED_COLUMNS``) ended ``finished``."""
    bad = row.count_failed + row.count_error + row.count_lost + row.count_cancelled + row.items_failed
    return row.state not in (TaskState.CANCELLED, TaskState.ABORTED) and not bad


def _ended(row: Any) -> bool:
    return row.finished_at is not None or row.state == TaskState.ABORTED


def link(
    connection: Connection, child_id: str, parents: Sequence[str], run_if: str, tenant: str | None
) -> Linked:
    """Link a new task to its ``parents`` (in its creation transaction, before its events) and
    set its hold; raises ``UnknownParent`` for a parent that does not exist (or is another
    tenant's)."""
    found: dict[str, Any] = {}
    # In id order: two creations that share parents lock them in the same order.
    for parent_id in sorted(set(parents)):
        query = update(Task).where(Task.id == parent_id)
        if tenant is not None:
            query = query.where(Task.tenant == tenant)
        row = connection.execute(query.values(children=Task.children + 1).returning(*_ENDED_COLUMNS)).first()
        if row is None:
            raise UnknownParent(parent_id)
        found[parent_id] = row
    now = datetime.now(UTC)
    rows, left, cancel_reason = [], 0, None
    for position, parent_id in enumerate(dict.fromkeys(parents)):
        row = found[parent_id]
        ended = _ended(row)
        ok = ended and succeeded(row)
        if ended and not ok and run_if == "success" and cancel_reason is None:
            cancel_reason = _reason(parent_id, row)
        left += not ended
        rows.append(
            {
                "child_id": child_id,
                "parent_id": parent_id,
                "position": position,
                "ended_at": now if ended else None,
                "succeeded": ok if ended else None,
            }
        )
    connection.execute(insert(TaskParent), rows)
    linked = Linked(left, cancel_reason)
    # A task to cancel waits until its events are written (``drop``): created, shown, never run.
    hold = RELEASING if left == 0 and cancel_reason is None else WAITING
    connection.execute(
        update(Task).where(Task.id == child_id).values(parents_left=left, run_if=run_if, hold=hold)
    )
    return linked


def waiting_text(parents: Sequence[str]) -> str:
    """The first message of a held task's events."""
    named = list(dict.fromkeys(parents))
    return f"waiting for task{'s' if len(named) > 1 else ''} {', '.join(named)}"


class Settled(NamedTuple):
    """What the ends of parents did: the children whose hold the broker is to act on, and the
    children cancelled that have callbacks to fire."""

    holds: list[str]
    ended: list[str]


def settle(connection: Connection, parents: Iterable[str]) -> Settled:
    """Decide the open links of ``parents``, which have just ended (their rows locked by the
    caller's transaction), and what follows for their children, in that transaction: a few
    statements per parent, however many children wait for it."""
    holds: list[str] = []
    ended: list[str] = []
    frontier = sorted(set(parents))
    now = datetime.now(UTC)
    while frontier:
        following: list[str] = []
        for parent_id in frontier:
            parent = connection.execute(select(*_ENDED_COLUMNS).where(Task.id == parent_id)).first()
            if parent is None:
                continue
            ok = succeeded(parent)
            children = sorted(
                connection.execute(
                    update(TaskParent)
                    .where(TaskParent.parent_id == parent_id, TaskParent.ended_at.is_(None))
                    .values(ended_at=now, succeeded=ok)
                    .returning(TaskParent.child_id)
                ).scalars()
            )
            released: list[str] = []
            dropped: list[str] = []
            for part in _parts(children):
                for child in _counted_down(connection, part):
                    if child.hold != WAITING:
                        continue
                    if not ok and child.run_if == "success":
                        dropped.append(child.id)
                        if child.callbacks:
                            ended.append(child.id)
                        if child.children:
                            following.append(child.id)
                    elif child.parents_left <= 0:
                        released.append(child.id)
            for part in _parts(released):
                connection.execute(
                    update(Task).where(Task.id.in_(part), Task.hold == WAITING).values(hold=RELEASING)
                )
            if dropped:
                drop(connection, dropped, _reason(parent_id, parent), now)
            holds += released + dropped
        frontier = sorted(set(following))
    return Settled(holds, ended)


#: Children one statement counts down or changes at most.
_PART = 5000


def _parts(ids: Sequence[str]) -> Iterator[list[str]]:
    for start in range(0, len(ids), _PART):
        yield list(ids[start : start + _PART])


def _counted_down(connection: Connection, children: list[str]) -> Sequence[Any]:
    """One parent fewer left for each of ``children``; their rows as that leaves them. The rows
    are locked in id order first (PostgreSQL), as every transaction that counts them down does."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(Task.id).where(Task.id.in_(children)).order_by(Task.id).with_for_update())
    return connection.execute(
        update(Task)
        .where(Task.id.in_(children))
        .values(parents_left=Task.parents_left - 1)
        .returning(Task.id, Task.parents_left, Task.run_if, Task.hold, Task.callbacks, Task.children)
    ).all()


def _reason(parent_id: str, parent: Any) -> str:
    status = TaskStatus.CANCELLED if parent.state == TaskState.CANCELLED else TaskStatus.FINISHED_WITH_ERRORS
    if parent.state == TaskState.ABORTED:
        status = TaskStatus.ABORTED
    return f"task {parent_id} ended {status.value}"


def drop(connection: Connection, children: Sequence[str], reason: str, now: datetime | None = None) -> None:
    """End held tasks ``cancelled`` for ``reason``, in the caller's transaction: their jobs, all
    held and so all ``enqueue``, never run; the broker drops them when their hold is
    ``dropping``."""
    now = now or datetime.now(UTC)
    for part in _parts(children):
        connection.execute(
            update(Event)
            .where(Event.task_id.in_(part), Event.status == EventStatus.ENQUEUE.value)
            .values(status=EventStatus.CANCELLED.value, finished_at=now, updated_at=now)
            .execution_options(synchronize_session=False)
        )
        connection.execute(
            update(Task)
            .where(Task.id.in_(part))
            .values(
                state=TaskState.CANCELLED.value,
                cancelled_at=now,
                finished_at=now,
                count_cancelled=Task.count_cancelled + Task.count_enqueue,
                count_enqueue=0,
                cancel_reason=reason,
                hold=DROPPING,
            )
        )
    logger.info("%d task(s) cancelled: %s", len(children), reason)


def due(connection: Connection, ids: Sequence[str] | None) -> list[Any]:
    """Holds to act on (``releasing`` or ``dropping``): those of tasks ``ids``, or any."""
    query = select(Task.id, Task.hold, Task.state).where(Task.hold.in_(DUE_HOLDS))
    if ids is not None:
        query = query.where(Task.id.in_(sorted(set(ids))))
    return list(connection.execute(query.order_by(Task.id).limit(RELEASE_BATCH)).all())


def mark(connection: Connection, released: Sequence[str], dropped: Sequence[str]) -> None:
    """Record that the broker released or dropped these tasks' held jobs."""
    for ids, before, after in ((released, RELEASING, RELEASED), (dropped, DROPPING, DROPPED)):
        for part in _parts(sorted(ids)):
            connection.execute(update(Task).where(Task.id.in_(part), Task.hold == before).values(hold=after))
