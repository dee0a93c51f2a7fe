"""What task feeds ask of a broker (``Broker.feeds``): tuning, pausing, cancelling and
reading a feed, and the releases that wait for an interval.

The releases themselves happen inside the broker's own steps: the staging's publish makes
the first release, and every end of a fed job (acknowledged, settled, killed, released,
sent to the retry set, deleted) frees its slot and releases in the same atomic step. A job
going to the retry set frees its slot; when it is due again it rejoins the front of its
feed's held jobs. A job given back or recovered from a dead process keeps its slot.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from asynctask.feeds import FeedChange, FeedState

#: Seconds between two ``Feeds.tick`` calls of a worker: interval releases are late by at
#: most this much.
TICK = 0.2


class Feeds(ABC):
    errors: ClassVar[tuple[type[BaseException], ...]]

    @abstractmethod
    def update(self, task_id: str, change: FeedChange) -> FeedState | None:
        """Apply ``change`` and release at once what it allows (a higher ``parallel``, a
        resume), atomically; a new ``priority`` applies to the task's released jobs that
        have not started too. Returns the feed as changed, or None if the task has no feed."""

    @abstractmethod
    def state(self, task_id: str) -> FeedState | None:
        """The feed now, or None if the task has none. Constant cost, whatever the number of
        held jobs."""

    @abstractmethod
    def cancel(self, task_id: str) -> int:
        """Drop the feed's held jobs (they never run) and stop releasing; return how many
        were dropped. Released jobs are left to the task's cancellation."""

    @abstractmethod
    def tick(self) -> int:
        """Release for every feed whose interval has passed since its last release and that
        has room, and for every feed whose ends this process counted without releasing yet
        (a broker that releases in steps); return how many jobs were released. Called by
        every worker every ``TICK`` seconds: cheap when nothing is due."""
