"""FeedTicker: releases the jobs of fed tasks whose interval has passed.

A feed releases when one of its jobs ends, inside the broker step that ends it; only a feed
with an ``interval`` must also be released when time passes. Every worker process ticks:
no process is the feeder, so losing any of them never stalls a feed, and the broker's
atomic release means two ticking processes never release the same job twice.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import ClassVar

from asynctask.brokers.feeds import TICK, Feeds
from asynctask.supervision import Activity, Loop

logger = logging.getLogger("asynctask.feeds")


@dataclass(eq=False)
class FeedTicker(Loop):
    thread_name: ClassVar[str] = "asynctask-feeds"
    feeds: Feeds
    tick: float = TICK

    def run(self) -> None:
        activity = Activity("feed tick", logger, self.feeds.errors)
        while not self._stopped.is_set():
            released = activity.attempt(self.feeds.tick)
            # Jittered, so that the ticks of processes started together spread out.
            pause = self.tick * (0.5 + random.random()) if released is not None else activity.pause()
            self._stopped.wait(pause)
