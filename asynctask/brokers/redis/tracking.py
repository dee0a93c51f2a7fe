"""The Redis broker's tracking store: transitions go to the tracking stream (which a flusher
applies to SQL), cancelled tasks to a hash every worker reads."""

from __future__ import annotations

import copy
from typing import cast

import redis

from asynctask import payload
from asynctask.brokers.redis.connection import same_database
from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys
from asynctask.settings import Settings
from asynctask.tracking.store import TrackingApplier, TrackingStore


class RedisTrackingStore(TrackingStore):
    errors = (redis.RedisError, OSError)

    def __init__(self, conn: redis.Redis, keys: Keys, scripts: Scripts, settings: Settings) -> None:
        self.redis = conn
        self.keys = keys
        self.scripts = scripts
        self.settings = settings

    def write_transitions(self, transitions: list[str]) -> None:
        """Append the batch to the tracking stream as one entry."""
        self.scripts.record_transitions(self.keys, self.redis, transitions)

    def position(self) -> int:
        return int(cast(bytes | None, self.redis.get(self.keys.tracking_seq)) or 0)

    def cancel_task(self, task_id: str) -> int:
        """Every worker sees the new generation at its next claim and reloads the cancelled set."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.cancelled_tasks, task_id, payload.now())
        pipe.incr(self.keys.cancel_generation)
        pipe.get(self.keys.tracking_seq)
        return int(pipe.execute()[-1] or 0)

    def cancel_generation(self) -> bytes:
        return cast(bytes | None, self.redis.get(self.keys.cancel_generation)) or b"0"

    def cancelled_tasks(self) -> frozenset[str]:
        names = cast(list[bytes], self.redis.hkeys(self.keys.cancelled_tasks))
        return frozenset(n.decode() if isinstance(n, bytes) else n for n in names)

    def is_cancelled(self, task_id: str) -> bool:
        return bool(self.redis.hexists(self.keys.cancelled_tasks, task_id))

    def through(self, connection: object) -> TrackingStore:
        if isinstance(connection, redis.Redis) and same_database(connection, self.redis):
            store = copy.copy(self)
            store.redis = connection
            return store
        return self

    def applier(self, identity: str) -> TrackingApplier | None:
        if not self.settings.tracking or self.settings.flusher == "off":
            return None
        # The flushers need SQLAlchemy: a worker that does not track never imports them.
        from asynctask.brokers.redis.applier import FlusherProcessApplier, FlusherThreadApplier

        if self.settings.flusher == "thread":
            return FlusherThreadApplier(self.redis, self.keys, self.settings, identity)
        return FlusherProcessApplier(self.redis, self.keys, self.settings, identity)
