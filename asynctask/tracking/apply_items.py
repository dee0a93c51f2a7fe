"""Applying the item counts and failed items of jobs that run their chunk one item at a time
(``asynctask.each``), inside the transaction of the rest of their batch.

A batch without them never comes here, so jobs that do not use ``each`` pay nothing for it.

The counts a job reports are its totals over every run, so applying one twice, or an older one
after a newer, changes nothing: an event's counts only move forward, and its task's move by
the same difference. A failed item is keyed by its event and its place in the chunk, so a
replayed batch, or a rerun that fails the same item again, stores it once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite

from asynctask.tracking.models import Event, FailedItem, Task
from asynctask.tracking.transitions import Transition


def apply(connection: Connection, items: Sequence[tuple[int, str | None, Transition]]) -> None:
    """``items``: (event id, task id, transition), each job's in stream order. The events'
    rows are locked by the caller, and their tasks' too."""
    event_ids = sorted({event_id for event_id, _, _ in items})
    counts = {
        row.id: [row.items_done or 0, row.items_failed or 0]
        for row in connection.execute(
            select(Event.id, Event.items_done, Event.items_failed).where(Event.id.in_(event_ids))
        )
    }
    before = {event_id: tuple(pair) for event_id, pair in counts.items()}
    task_of: dict[int, str | None] = {}
    failures: list[dict[str, Any]] = []
    for event_id, task_id, t in items:
        task_of[event_id] = task_id
        current = counts[event_id]
        done, failed = t.done or 0, t.failed or 0
        if done >= current[0] and failed >= current[1]:
            counts[event_id] = [done, failed]
        if t.position is not None:
            failures.append(
                {
                    "task_id": task_id,
                    "event_id": event_id,
                    "position": t.position,
                    "item": t.item,
                    "message": t.text or "",
                    "at": datetime.fromtimestamp(t.at, UTC),
                }
            )
    moved = [event_id for event_id in event_ids if tuple(counts[event_id]) != before[event_id]]
    if moved:
        connection.execute(
            update(Event)
            .where(Event.id == bindparam("event"))
            .values(items_done=bindparam("done"), items_failed=bindparam("failed")),
            [{"event": e, "done": counts[e][0], "failed": counts[e][1]} for e in moved],
        )
    deltas: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for event_id in moved:
        task_id = task_of[event_id]
        if task_id is not None:
            deltas[task_id][0] += counts[event_id][0] - before[event_id][0]
            deltas[task_id][1] += counts[event_id][1] - before[event_id][1]
    if deltas:
        connection.execute(
            update(Task)
            .where(Task.id == bindparam("task"))
            .values(
                items_done=Task.items_done + bindparam("done"),
                items_failed=Task.items_failed + bindparam("failed"),
            ),
            [{"task": task, "done": d[0], "failed": d[1]} for task, d in sorted(deltas.items())],
        )
    if failures:
        insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
        connection.execute(
            insert(FailedItem).on_conflict_do_nothing(index_elements=["event_id", "position"]), failures
        )
