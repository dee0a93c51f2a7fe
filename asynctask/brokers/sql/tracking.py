"""The SQL broker's tracking store: the jobs' database is the tracking database, so a batch
of transitions is applied to the tracking tables in a transaction; cancelled tasks are rows
every worker reads."""

from __future__ import annotations

from sqlalchemy.exc import SQLAlchemyError

from asynctask import payload
from asynctask.brokers.sql.transactions import Store
from asynctask.tracking.store import TrackingStore


class SqlTrackingStore(TrackingStore):
    errors = (SQLAlchemyError, OSError)

    def __init__(self, store: Store) -> None:
        self.store = store

    def write_transitions(self, transitions: list[str]) -> None:
        """Apply the batch to the tracking tables in a transaction of its own."""
        with self.store.write() as tx:
            self.store.record(tx.connection, transitions)

    def position(self) -> int:
        return self.store.tracking_position()

    def cancel_task(self, task_id: str) -> int:
        """Workers see the new cancellation generation (the count and latest time of the
        cancellations) at their next claim, and reload the cancelled set."""
        with self.store.write(single_statement=True) as tx:
            tx.connection.execute(self.store.sql.cancel, {"task_id": task_id, "at": payload.now()})
        return self.position()

    def cancel_generation(self) -> bytes:
        with self.store.read() as connection:
            return str(connection.execute(self.store.sql.generation).scalar()).encode()

    def cancelled_tasks(self) -> frozenset[str]:
        with self.store.read() as connection:
            return frozenset(str(name) for name in connection.execute(self.store.sql.cancelled).scalars())

    def is_cancelled(self, task_id: str) -> bool:
        with self.store.read() as connection:
            return connection.execute(self.store.sql.is_cancelled, {"task_id": task_id}).first() is not None
