"""A feed's settings, a change to them, and what a broker reports of a feed."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The payload field that marks a job as one of a fed task's: the task id. The brokers look
#: for it to free the job's feed slot when it ends.
FEED_FIELD = "feed"

#: Bounds that keep every value storable as it is (a 32-bit priority column, a float
#: interval Lua and SQL both read exactly).
MAX_PARALLEL = 1_000_000
MAX_INTERVAL = 86_400.0
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Feed:
    """How a fed task's jobs are released.

    ``parallel``: at most this many of the task's jobs are released and not ended (queued,
    waiting for a concurrency key, or running). ``interval``: seconds between two releases
    (0: release whenever a job ends). ``priority``: lower runs first (as the SQL broker's
    priority column; 0 is every other job's). ``paused``: nothing is released."""

    parallel: int
    interval: float = 0.0
    priority: int = 0
    paused: bool = False

    def __post_init__(self) -> None:
        check_change(parallel=self.parallel, interval=self.interval, priority=self.priority)

    def changed(self, change: FeedChange) -> Feed:
        return Feed(
            parallel=self.parallel if change.parallel is None else change.parallel,
            interval=self.interval if change.interval is None else change.interval,
            priority=self.priority if change.priority is None else change.priority,
            paused=self.paused if change.paused is None else change.paused,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "parallel": self.parallel,
            "interval": self.interval,
            "priority": self.priority,
            "paused": self.paused,
        }

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> Feed:
        """The settings ``as_dict`` wrote (a task row's ``feed`` column, which may hold more)."""
        return cls(
            parallel=stored["parallel"],
            interval=stored["interval"],
            priority=stored["priority"],
            paused=stored["paused"],
        )


@dataclass(frozen=True, slots=True)
class FeedChange:
    """A change to a running feed: None leaves a setting as it is."""

    parallel: int | None = None
    interval: float | None = None
    priority: int | None = None
    paused: bool | None = None

    def __post_init__(self) -> None:
        check_change(parallel=self.parallel, interval=self.interval, priority=self.priority)


@dataclass(frozen=True, slots=True)
class FeedState:
    """A feed as its broker holds it now."""

    feed: Feed
    #: Jobs not released yet.
    held: int
    #: Jobs released and not ended (queued, waiting for a concurrency key, or running).
    out: int


def check_change(*, parallel: object = None, interval: object = None, priority: object = None) -> None:
    """Raise ValueError naming the field for a value no feed can have (None: not given)."""
    if parallel is not None and (
        isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= MAX_PARALLEL
    ):
        raise ValueError(f"parallel must be an integer from 1 to {MAX_PARALLEL}")
    if interval is not None and (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not math.isfinite(interval)
        or not 0 <= interval <= MAX_INTERVAL
    ):
        raise ValueError(f"interval must be a number of seconds from 0 to {MAX_INTERVAL:g}")
    if priority is not None and (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise ValueError(f"priority must be an integer from {PRIORITY_MIN} to {PRIORITY_MAX}")
