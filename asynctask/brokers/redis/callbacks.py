"""Pushing a task's due callbacks to Redis, each once.

The transaction that ends a task marks its callbacks due in SQL; Redis cannot join that
transaction, so the push comes after it: a script pushes the job and sets a marker named for its
jid, or does nothing if the marker is there, then the callback is marked pushed in SQL. A pusher
that dies between the two leaves the callback due; whoever pushes it again finds the marker and
pushes nothing. The marker outlives any pusher's retries (``MARKER_SECONDS``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from sqlalchemy import Engine

from asynctask.brokers.redis.scripts import script_source
from asynctask.db.engine import writer
from asynctask.keys import Keys
from asynctask.tracking import callbacks

logger = logging.getLogger("asynctask.tracking")

#: How long a pushed callback's marker is kept: far beyond the time a due callback waits for a
#: pusher (seconds, unless SQL is down that long).
MARKER_SECONDS = 7 * 24 * 3600


@dataclass(eq=False)
class RedisCallbackPusher(callbacks.CallbackPusher):
    conn: redis.Redis
    keys: Keys

    def __post_init__(self) -> None:
        self._push_once = self.conn.register_script(script_source("push_once"))

    def push_due(self, engine: Engine, ids: Sequence[int] | None = None) -> int:
        pushed = 0
        while True:
            with engine.connect() as connection:
                found = callbacks.due(connection, ids)
            if not found:
                return pushed
            pipe = self.conn.pipeline(transaction=False)
            for callback in found:
                self._push_once(
                    keys=[
                        self.keys.callback_pushed(callback.jid),
                        self.keys.queues,
                        self.keys.queue(callback.queue),
                    ],
                    args=[callback.queue, callback.payload, MARKER_SECONDS],
                    client=pipe,
                )
            pipe.execute()
            with writer(engine).begin() as connection:
                callbacks.mark_pushed(connection, [callback.id for callback in found])
            for callback in found:
                logger.info("task %s: pushed its callback job %s", callback.task_id, callback.jid)
            pushed += len(found)
