"""Pushing the jobs running jobs added to their tasks, on Redis, each addition once.

The transaction that adds them writes their events and their payloads in SQL (``due``); Redis
cannot join it, so the push comes after: a script pushes the batch's jobs and sets a marker named
for the first of them, or does nothing if the marker is there, then the addition is marked pushed
in SQL. A pusher that dies between the two leaves it due; whoever pushes it again (the job run
again, or a flusher's look) finds the marker and pushes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from sqlalchemy import Engine

from asynctask.brokers.redis.callbacks import MARKER_SECONDS
from asynctask.brokers.redis.push import held_entry
from asynctask.brokers.redis.scripts import script_source
from asynctask.db.engine import writer
from asynctask.feeds import Feed
from asynctask.keys import Keys
from asynctask.tracking import additions


@dataclass(eq=False)
class RedisAdditionPusher(additions.AdditionPusher):
    conn: redis.Redis
    keys: Keys

    def __post_init__(self) -> None:
        self._push_added = self.conn.register_script(script_source("push_added"))
        self._feed_add = self.conn.register_script(script_source("feed_add"))

    def push_due(self, engine: Engine, ids: Sequence[int] | None = None) -> int:
        pushed = 0
        while True:
            with engine.connect() as connection:
                found = additions.due(connection, ids)
            if not found:
                return pushed
            pipe = self.conn.pipeline(transaction=False)
            for addition in found:
                self._push(addition, pipe)
            pipe.execute()
            with writer(engine).begin() as connection:
                additions.mark_pushed(connection, [addition.id for addition in found])
            pushed += len(found)

    def _push(self, addition: additions.DueAddition, pipe: redis.client.Pipeline) -> None:
        """Queue the script that pushes one addition's jobs onto their queue, or, for a fed
        task, holds them in its feed (made again from the task's settings if it was forgotten)."""
        marker = self.keys.added_pushed(addition.jids[0])
        if addition.feed is None:
            self._push_added(
                keys=[marker, self.keys.queues, self.keys.queue(addition.queue)],
                args=[
                    self.keys.prefix,
                    MARKER_SECONDS,
                    addition.queue,
                    addition.share or "",
                    *addition.payloads,
                ],
                client=pipe,
            )
            return
        feed = Feed.from_dict(addition.feed)
        entries = [
            held_entry({"jid": jid, "queue": addition.queue}, encoded)
            for jid, encoded in zip(addition.jids, addition.payloads, strict=True)
        ]
        self._feed_add(
            keys=[marker, self.keys.feed(addition.task_id), self.keys.feed_held(addition.task_id)],
            args=[
                self.keys.prefix,
                addition.task_id,
                MARKER_SECONDS,
                feed.parallel,
                repr(float(feed.interval)),
                feed.priority,
                addition.share or "",
                *entries,
            ],
            client=pipe,
        )
