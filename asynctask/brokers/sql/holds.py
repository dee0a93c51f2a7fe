"""Releasing and dropping the held jobs of tasks whose parents ended, in the transaction that
ended the last of them (``Store.record``), or in one of their own after a cancel or for what a
process left due: a released feed is unpaused and due at once, so the next tick of any worker
releases its jobs; a dropped one loses its held rows and its row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, bindparam, text

from asynctask import payload
from asynctask.brokers.sql.feeds import SqlFeeds
from asynctask.brokers.sql.transactions import HoldsInTransaction, Store
from asynctask.tracking import parents

_RESUME = text("UPDATE asynctask_feed SET paused = false, next_at = :now WHERE task_id IN :ids").bindparams(
    bindparam("ids", expanding=True)
)


@dataclass(eq=False)
class SqlHolds(HoldsInTransaction, parents.HoldReleaser):
    feeds: SqlFeeds
    store: Store

    def release_due(self, engine: Engine, ids: Sequence[str] | None = None) -> int:
        """``engine`` is the broker's own database: its tracking tables are there."""
        with self.store.write() as tx:
            return self.release_in(tx.connection, ids)

    def release_in(self, connection: Connection, ids: Sequence[str] | None) -> int:
        # Every one of them, a batch at a time: the transaction that settled them commits what
        # it does here.
        acted = 0
        while count := self._release_batch(connection, ids):
            acted += count
        return acted

    def _release_batch(self, connection: Connection, ids: Sequence[str] | None) -> int:
        found = parents.due(connection, ids)
        if not found:
            return 0
        released = [row.id for row in found if row.hold == parents.RELEASING]
        dropped = [row.id for row in found if row.hold == parents.DROPPING]
        # Feeds are locked before anything of their jobs changes, in task id order.
        self.feeds.lock(connection, sorted(released + dropped))
        now = payload.now()
        if released:
            connection.execute(_RESUME, {"now": now, "ids": released})
        for task_id in dropped:
            connection.execute(self.feeds.statements.drop_held, {"task_id": task_id})
            connection.execute(self.feeds.statements.forget, {"task_id": task_id})
        parents.mark(connection, released, dropped)
        return len(found)
