"""How long a running task has left: its remaining jobs over the rate its jobs have been ending
at, from the task row alone (its counts and times), never from its events, so a status poll
costs the same for ten jobs or ten million.

The rate is measured from one of two points, whichever is the later one that has enough behind
it:
- the task's first start (``started_at``): jobs ended (finished, failed or error) since then;
- for a fed task, the last change of its feed (``update_task``: parallel, interval, priority,
  pause or resume), which stores a *rate mark* (when, and how many jobs had ended then) in the
  task's ``feed`` column: jobs ended since the mark, once at least ``parallel`` of them have
  (one turn of every slot; until then the rate since the first start stands in).

Counts reach SQL after the job ends (the flusher's lag on Redis, well under a second; none on
a SQL broker): both the jobs ended and the times are as the database saw them, so the lag
makes the estimate late by about itself, and no more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

#: The key of the rate mark in a fed task's ``feed`` column (next to its settings).
RATE_MARK = "rate_from"


@dataclass(frozen=True, slots=True)
class RateMark:
    """When the feed last changed, and how many of the task's jobs had ended then."""

    at: datetime
    ended: int

    def as_json(self) -> dict[str, Any]:
        return {"at": self.at.timestamp(), "ended": self.ended}


def read_mark(feed: Mapping[str, Any] | None) -> RateMark | None:
    """The rate mark stored with a task's feed settings, or None (none yet, or not one)."""
    mark = feed.get(RATE_MARK) if isinstance(feed, Mapping) else None
    if not isinstance(mark, Mapping):
        return None
    at, ended = mark.get("at"), mark.get("ended")
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None
    if isinstance(ended, bool) or not isinstance(ended, int) or ended < 0:
        return None
    return RateMark(datetime.fromtimestamp(at, UTC), ended)


def eta_seconds(
    *,
    remaining: int,
    ended: int,
    started_at: datetime | None,
    now: datetime,
    mark: RateMark | None = None,
    fresh: int = 1,
) -> float | None:
    """Seconds until the ``remaining`` jobs have ended at the rate seen, or None when there is
    no rate to go by (nothing ended yet) or nothing remains.

    ``remaining``: the task's jobs not done, stopped ones included (a resume runs them again);
    ``ended``: its jobs finished, failed or error; ``mark``: the last change of its feed;
    ``fresh``: how many jobs must have ended since the mark before its rate is used."""
    if remaining <= 0 or ended <= 0:
        return None
    rate = None
    if mark is not None and ended - mark.ended >= max(1, fresh):
        rate = _rate(ended - mark.ended, mark.at, now)
    if rate is None and started_at is not None:
        rate = _rate(ended, started_at, now)
    if rate is None:
        return None
    return round(remaining / rate, 3)


def _rate(ended: int, since: datetime, now: datetime) -> float | None:
    elapsed = (now - since).total_seconds()
    return ended / elapsed if elapsed > 0 else None
