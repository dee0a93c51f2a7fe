"""Resumable jobs' checkpoints in the SQL broker (see ``brokers.checkpoints``): a row of
``asynctask_checkpoint`` per job (Alembic revision 0011), holding its cursor, its iterations
and its stop flag.

Each write but a withdrawal is one upsert or delete, in its own transaction: on PostgreSQL a
statement run without BEGIN and COMMIT (one round trip,
``Store.write(single_statement=True)``). A withdrawal (a resume, rare) is two statements in
one transaction. A stop is flagged by an upsert that changes only a row whose flag is down, so
of two requests racing for one job exactly one finds it changed: the second waits on the
first's row lock (PostgreSQL) or write lock (SQLite), then sees the flag already up.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from asynctask import payload
from asynctask.brokers.checkpoints import CHECKPOINT_TTL, Checkpoint, Checkpoints
from asynctask.brokers.sql.models import Checkpoint as CheckpointRow
from asynctask.brokers.sql.models import QueuedJob
from asynctask.brokers.sql.push import JID_WIDTH
from asynctask.brokers.sql.transactions import Store

C = CheckpointRow
J = QueuedJob


class SqlCheckpoints(Checkpoints):
    errors = Store.errors

    def __init__(self, store: Store) -> None:
        self.store = store
        self._insert = pg_insert if store.postgres else sqlite_insert

    def load(self, jid: str) -> Checkpoint:
        query = select(C.cursor, C.iterations, C.stop).where(C.jid == _key(jid))
        with self.store.read() as connection:
            found = connection.execute(query).first()
        if found is None:
            return Checkpoint()
        return Checkpoint(found.cursor, int(found.iterations), bool(found.stop))

    def save(self, jid: str, cursor: str, iterations: int) -> bool:
        written = {"cursor": cursor, "iterations": iterations, "updated_at": payload.now()}
        upsert = self._insert(C).values(jid=_key(jid), stop=False, **written)
        statement = upsert.on_conflict_do_update(index_elements=[C.jid], set_=written).returning(C.stop)
        with self.store.write(single_statement=True) as tx:
            return bool(tx.connection.execute(statement).scalar_one())

    def clear(self, jid: str) -> None:
        with self.store.write(single_statement=True) as tx:
            tx.connection.execute(delete(C).where(C.jid == _key(jid)))

    def request_stop(self, jid: str) -> bool:
        now = payload.now()
        upsert = self._insert(C).values(jid=_key(jid), cursor=None, iterations=0, stop=True, updated_at=now)
        statement = upsert.on_conflict_do_update(
            index_elements=[C.jid], set_={"stop": True, "updated_at": now}, where=C.stop.is_(False)
        ).returning(C.jid)
        with self.store.write(single_statement=True) as tx:
            return tx.connection.execute(statement).first() is not None

    def withdraw_stop(self, jid: str) -> None:
        key = _key(jid)
        with self.store.write() as tx:
            # A row that holds no cursor was only a stop request: nothing of it is left to keep.
            tx.connection.execute(delete(C).where(C.jid == key, C.cursor.is_(None)))
            tx.connection.execute(update(C).where(C.jid == key).values(stop=False))

    def is_claimed(self, jid: str) -> bool:
        query = select(J.id).where(J.jid == _key(jid), J.locked_by.is_not(None)).limit(1)
        with self.store.read() as connection:
            return connection.execute(query).first() is not None

    def expire(self, now: float) -> int:
        """Forget the checkpoints not written for ``CHECKPOINT_TTL`` seconds (those of jobs
        deleted from a set, or of a worker that died between a job's acknowledgement and the
        deletion of its checkpoint), as Redis expires them; return how many."""
        with self.store.write(single_statement=True) as tx:
            gone = tx.connection.execute(delete(C).where(C.updated_at < now - CHECKPOINT_TTL))
        return int(gone.rowcount)


def _key(jid: str) -> str:
    """The jid as the tables store it (``push.jid``: cut to the column's width)."""
    return jid[:JID_WIDTH]
