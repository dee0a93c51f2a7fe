"""Task feeds on Redis: each operation is one call of a Lua script (``lua/feed_*.lua``) over
the keys of ``Keys.feed``, ``feed_held``, ``feed_out`` and ``feeds``; the releases proper
live in ``lua/feeds.lua``, included by every script that ends jobs, where every end of a fed
job runs them. See docs/internals/feeds-redis.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from asynctask.brokers.feeds import Feeds
from asynctask.brokers.redis.scripts import Scripts
from asynctask.feeds import Feed, FeedChange, FeedState
from asynctask.keys import Keys

#: Feeds one tick releases at most: a tick stays short however many feeds are due; the
#: others are released by the next ticks.
TICK_FEEDS = 50

#: Queue entries searched from each end of a queue for a feed's released jobs when its
#: priority moves them to the other end (see the ``feed_update`` script).
MOVE_REACH = 10_000


class RedisFeeds(Feeds):
    errors = (redis.RedisError, OSError)

    def __init__(self, conn: redis.Redis, keys: Keys, scripts: Scripts) -> None:
        self.redis = conn
        self.keys = keys
        self.scripts = scripts

    def update(self, task_id: str, change: FeedChange) -> FeedState | None:
        def text(value: object) -> str:
            return "" if value is None else str(value)

        paused = "" if change.paused is None else ("1" if change.paused else "0")
        interval = "" if change.interval is None else repr(float(change.interval))
        reply = self.scripts.feed_update(
            args=[
                self.keys.prefix,
                task_id,
                text(change.parallel),
                interval,
                text(change.priority),
                paused,
                MOVE_REACH,
            ]
        )
        return _state(reply)

    def act_on_many(self, resumed: Sequence[str], cancelled: Sequence[str]) -> None:
        """Resume the feeds ``resumed`` and cancel the feeds ``cancelled``, in one round trip:
        the holds of tasks whose parents ended (``tracking.parents``), where each is harmless
        twice."""
        pipe = self.redis.pipeline(transaction=False)
        for task_id in resumed:
            self.scripts.feed_update(
                args=[self.keys.prefix, task_id, "", "", "", "0", MOVE_REACH], client=pipe
            )
        for task_id in cancelled:
            self.scripts.feed_cancel(args=[self.keys.prefix, task_id], client=pipe)
        pipe.execute()

    def state(self, task_id: str) -> FeedState | None:
        return _state(self.scripts.feed_state(args=[self.keys.prefix, task_id]))

    def cancel(self, task_id: str) -> int:
        return int(self.scripts.feed_cancel(args=[self.keys.prefix, task_id]))

    def tick(self) -> int:
        return int(self.scripts.feed_tick(args=[self.keys.prefix, TICK_FEEDS]))


def _state(reply: Any) -> FeedState | None:
    """A feed script's reply ``[parallel, interval, priority, paused, held, out]`` read."""
    if reply is None:
        return None
    parallel, interval, priority, paused, held, out = reply
    feed = Feed(
        parallel=int(parallel),
        interval=float(interval),
        priority=int(priority),
        paused=paused == b"1",
    )
    return FeedState(feed=feed, held=int(held), out=int(out))
