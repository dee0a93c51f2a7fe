"""Pushing jobs from an event loop on a SQL broker: ``SqlBroker.push``'s transaction, run on
SQLAlchemy's asyncio extension (psycopg's async mode, aiosqlite), so the loop never waits on
the database.

The statements are the broker's own (``SqlBroker.push_rows_in`` through ``run_sync``, which
SQLAlchemy runs on the async connection without a thread). Two things differ from a push in a
worker's process: SQLite's in-process writer lock is not taken (its ``BEGIN IMMEDIATE`` waits
for other writers in a thread of the driver's, not on the loop), and a fed task's release
deferred to after the commit is left to the feed's ticker, which releases it at its next tick.

Plain pushes (no feed, flow key or tracking) made side by side share a transaction
(``SharedTrips``): a thousand coroutines pushing at once commit once per trip, not once each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from sqlalchemy import Connection
from sqlalchemy.exc import DataError, IntegrityError

from asynctask import payload
from asynctask.brokers.shared_trips import Outcome, SharedTrips
from asynctask.brokers.sql.broker import SqlBroker
from asynctask.brokers.sql.push import is_keyed, push_rows
from asynctask.brokers.sql.transactions import JobRow, Tx
from asynctask.db.engine import create_async_database_engine
from asynctask.feeds import FEED_FIELD
from asynctask.settings import Settings

#: A plain push's entries and their rows.
Plain = tuple[payload.PushEntries, list[JobRow]]


class AsyncSqlPusher:
    def __init__(self, settings: Settings) -> None:
        #: Its statements and rules; its own (sync) engine connects only if something else asks.
        self.broker = SqlBroker(settings)
        self.engine = create_async_database_engine(settings.broker)
        self._writer = self.engine.execution_options(asynctask_immediate=True)
        self.max_payload_bytes = settings.max_payload_bytes
        self._shared = SharedTrips(self._push_together)

    async def push(self, entries: payload.PushEntries, *, transitions: Sequence[str] = ()) -> list[str]:
        """``SqlBroker.push``, awaited: one transaction, all the jobs or none."""
        rows = push_rows(entries, self.max_payload_bytes)
        if transitions or not all(_plain(job, r) for (job, _), r in zip(entries, rows, strict=True)):
            return await self._push_alone(entries, rows, transitions)
        await self._shared.join((entries, rows))
        return [str(job["jid"]) for job, _ in entries]

    async def _push_alone(
        self, entries: payload.PushEntries, rows: list[JobRow], transitions: Sequence[str]
    ) -> list[str]:
        async with self._writer.begin() as connection:
            stored, tx = await connection.run_sync(self._push, entries, rows, transitions)
        bell = self.broker.store.bell
        if tx.queues and bell is not None:
            bell.ring()
        return stored

    async def _push_together(self, pushes: list[Plain]) -> list[Outcome]:
        """Plain pushes in one transaction; when the database refused a row, each push in a
        transaction of its own, so that only the push it belongs to fails."""
        try:
            together = [entry for entries, _ in pushes for entry in entries]
            await self._push_alone(together, [r for _, rows in pushes for r in rows], ())
        except (IntegrityError, DataError):
            if len(pushes) == 1:
                raise
        else:
            return [None] * len(pushes)
        alone = await asyncio.gather(
            *(self._push_alone(entries, rows, ()) for entries, rows in pushes), return_exceptions=True
        )
        return [outcome if isinstance(outcome, BaseException) else None for outcome in alone]

    def _push(
        self,
        connection: Connection,
        entries: payload.PushEntries,
        rows: list[JobRow],
        transitions: Sequence[str],
    ) -> tuple[list[str], Tx]:
        tx = Tx(connection)
        stored = self.broker.push_rows_in(tx, entries, rows, transitions)
        self.broker.store.notify(connection, tx.queues)
        return stored, tx

    async def close(self) -> None:
        await self._shared.close()
        await self.engine.dispose()
        self.broker.close()


def _plain(job: payload.JobDict, job_row: JobRow) -> bool:
    """Whether a job needs nothing of its transaction but its row: no feed, no flow keys."""
    return FEED_FIELD not in job and not is_keyed(job, job_row)
