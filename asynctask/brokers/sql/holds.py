"""Releasing and dropping the held jobs of tasks whose parents ended, in the transaction that
ended the last of them (``Store.record``): a released feed is unpaused and due at once, so the
next tick of any worker releases its jobs; a dropped one loses its held rows and its row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, text

from asynctask import payload
from asynctask.brokers.sql.feeds import SqlFeeds
from asynctask.brokers.sql.transactions import HoldsInTransaction
from asynctask.tracking import parents

_RESUME = text("UPDATE asynctask_feed SET paused = false, next_at = :now WHERE task_id = :task_id")


@dataclass(eq=False)
class SqlHolds(HoldsInTransaction):
    feeds: SqlFeeds

    def release_in(self, connection: Connection, ids: Sequence[str]) -> None:
        found = parents.due(connection, ids)
        if not found:
            return
        released = [row.id for row in found if row.hold == parents.RELEASING]
        dropped = [row.id for row in found if row.hold == parents.DROPPING]
        # Feeds are locked before anything of their jobs changes, in task id order.
        self.feeds.lock(connection, sorted(released + dropped))
        now = payload.now()
        for task_id in released:
            connection.execute(_RESUME, {"now": now, "task_id": task_id})
        for task_id in dropped:
            connection.execute(self.feeds.statements.drop_held, {"task_id": task_id})
            connection.execute(self.feeds.statements.forget, {"task_id": task_id})
        parents.mark(connection, released, dropped)
