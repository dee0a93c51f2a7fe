"""Pushing a task's due callbacks as job rows: in the transaction that ended the task when a
worker's settling ended it (``Store.record``), else in a transaction of their own that takes
them (a cancel, or a push left undone by a process that died)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from asynctask import payload
from asynctask.brokers.sql.models import QUEUED
from asynctask.brokers.sql.push import row
from asynctask.brokers.sql.transactions import CallbacksInTransaction, Store
from asynctask.tracking import callbacks


@dataclass(eq=False)
class SqlCallbackPusher(callbacks.CallbackPusher, CallbacksInTransaction):
    store: Store

    def push_in(self, connection: Connection, ids: Sequence[int] | None) -> int:
        taken = callbacks.take(connection, ids)
        if not taken:
            return 0
        now = payload.now()
        self.store.insert_jobs(
            connection, [row(payload.loads(c.payload), QUEUED, now, c.payload) for c in taken]
        )
        self.store.notify(connection, {c.queue for c in taken})
        return len(taken)

    def push_due(self, engine: Engine, ids: Sequence[int] | None = None) -> int:
        """``engine`` is the broker's own database: its tracking tables are there."""
        pushed = 0
        while True:
            with self.store.write() as tx:
                count = self.push_in(tx.connection, ids)
            if not count:
                return pushed
            pushed += count
