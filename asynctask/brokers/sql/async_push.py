"""Pushing jobs from an event loop on a SQL broker: ``SqlBroker.push``'s transaction, run on
SQLAlchemy's asyncio extension (psycopg's async mode, aiosqlite), so the loop never waits on
the database.

The statements are the broker's own (``SqlBroker.push_rows_in`` through ``run_sync``, which
SQLAlchemy runs on the async connection without a thread). Two things differ from a push in a
worker's process: SQLite's in-process writer lock is not taken (its ``BEGIN IMMEDIATE`` waits
for other writers in a thread of the driver's, not on the loop), and a fed task's release
deferred to after the commit is left to the feed's ticker, which releases it at its next tick.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from asynctask import payload
from asynctask.brokers.sql.broker import SqlBroker
from asynctask.brokers.sql.push import push_rows
from asynctask.brokers.sql.store import JobRow, Tx
from asynctask.db.engine import create_async_database_engine
from asynctask.settings import Settings


class AsyncSqlPusher:
    def __init__(self, settings: Settings) -> None:
        #: Its statements and rules; its own (sync) engine connects only if something else asks.
        self.broker = SqlBroker(settings)
        self.engine = create_async_database_engine(settings.broker)
        self._writer = self.engine.execution_options(asynctask_immediate=True)
        self.max_payload_bytes = settings.max_payload_bytes

    async def push(
        self, entries: Sequence[tuple[payload.JobDict, float | None]], *, transitions: Sequence[str] = ()
    ) -> list[str]:
        """``SqlBroker.push``, awaited: one transaction, all the jobs or none."""
        rows = push_rows(entries, self.max_payload_bytes)
        async with self._writer.begin() as connection:
            stored, tx = await connection.run_sync(self._push, entries, rows, transitions)
        bell = self.broker.store.bell
        if tx.queues and bell is not None:
            bell.ring()
        return stored

    def _push(
        self,
        connection: Connection,
        entries: Sequence[tuple[payload.JobDict, float | None]],
        rows: list[JobRow],
        transitions: Sequence[str],
    ) -> tuple[list[str], Tx]:
        tx = Tx(connection)
        stored = self.broker.push_rows_in(tx, entries, rows, transitions)
        self.broker.store.notify(connection, tx.queues)
        return stored, tx

    async def close(self) -> None:
        await self.engine.dispose()
        self.broker.close()
