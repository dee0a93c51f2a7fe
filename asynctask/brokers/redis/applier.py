"""The Redis broker's tracking applier: a flusher reading the tracking stream into SQL,
in a child process (``flusher = "process"``, the default) or a thread of the worker."""

from __future__ import annotations

import logging

import redis

from asynctask.brokers.redis.flusher_process import FlusherProcess
from asynctask.keys import Keys
from asynctask.settings import Settings
from asynctask.tracking.store import TrackingApplier

logger = logging.getLogger("asynctask.tracking")


class FlusherProcessApplier(TrackingApplier):
    """Starts the child with the worker when it was given a tracking database; otherwise with
    the first transition, or when a heartbeat finds the stream not empty (another worker's
    leftovers), so that a worker that never tracks costs no process."""

    def __init__(self, conn: redis.Redis, keys: Keys, settings: Settings, identity: str) -> None:
        self.redis = conn
        self.keys = keys
        self.settings = settings
        self.process = FlusherProcess(settings, f"{identity}:flusher")

    def start(self) -> None:
        # A worker named a database to track into: the child's imports and connections, half a
        # second, are made while the worker starts, not while the first tracked jobs wait.
        if self.settings.flusher_starts_with_worker:
            self.process.ensure_started()

    def wake(self) -> None:
        self.process.ensure_started()

    def check(self) -> None:
        stream = self.keys.tracking_stream
        try:
            self.process.check(lambda: bool(self.redis.xlen(stream)))
        except (redis.RedisError, OSError) as exc:
            logger.error("tracking flusher check failed: %s", exc)

    def stop(self) -> None:
        self.process.stop()


class FlusherThreadApplier(TrackingApplier):
    def __init__(self, conn: redis.Redis, keys: Keys, settings: Settings, identity: str) -> None:
        # Only this applier writes SQL in the worker process; the child's needs no SQLAlchemy here.
        from asynctask.brokers.redis.flusher import Flusher
        from asynctask.db.engine import create_database_engine, writer

        self.flusher = Flusher(conn, keys, writer(create_database_engine(settings.database_url)), identity)

    def start(self) -> None:
        self.flusher.start()

    def wake(self) -> None:
        """The thread runs from the start."""

    def check(self) -> None:
        """A thread cannot die without the worker noticing: its loop never exits on errors."""

    def stop(self) -> None:
        self.flusher.stop()
        self.flusher.engine.dispose()
