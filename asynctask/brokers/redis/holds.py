"""Releasing and dropping the held jobs of tasks whose parents ended, on Redis: after the SQL
transaction that settled them (Redis cannot join it), their feeds are resumed or cancelled in
one round trip, then their holds are marked in SQL. Both are harmless twice: a process that
dies in between leaves the holds due for the next look, which acts again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import redis
from sqlalchemy import Engine

from asynctask.brokers.redis.feeds import RedisFeeds
from asynctask.brokers.redis.scripts import Scripts
from asynctask.db.engine import writer
from asynctask.keys import Keys
from asynctask.tracking import parents
from asynctask.tracking.status import TaskState


@dataclass(eq=False)
class RedisHolds(parents.HoldReleaser):
    conn: redis.Redis
    keys: Keys

    _feeds: RedisFeeds | None = field(default=None, init=False)

    def release_due(self, engine: Engine, ids: Sequence[str] | None = None) -> int:
        acted = 0
        while True:
            with engine.connect() as connection:
                found = parents.due(connection, ids)
            if not found:
                return acted
            ready = [row for row in found if row.state != TaskState.CREATING or self._published(row.id)]
            released = [row.id for row in ready if row.hold == parents.RELEASING]
            dropped = [row.id for row in ready if row.hold == parents.DROPPING]
            self._feeds_of().act_on_many(released, dropped)
            with writer(engine).begin() as connection:
                parents.mark(connection, released, dropped)
            acted += len(ready)
            if len(ready) < len(found):
                # The rest are tasks still being created: their creators act on them.
                return acted

    def _published(self, task_id: str) -> bool:
        """Whether the broker holds the feed of a task still being created."""
        return self._feeds_of().state(task_id) is not None

    def _feeds_of(self) -> RedisFeeds:
        """The feeds' scripts, bound on first use: most looks find nothing to act on."""
        if self._feeds is None:
            self._feeds = RedisFeeds(self.conn, self.keys, Scripts(self.conn))
        return self._feeds
