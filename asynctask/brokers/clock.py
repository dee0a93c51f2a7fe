"""The broker's clock, as the worker uses it to tell what is due.

Every process compares due times (scheduled jobs, retries, periodic ticks) with the same clock:
the broker's (Redis ``TIME``, PostgreSQL's ``clock_timestamp()``), so that a worker whose own
clock runs fast neither runs jobs early nor takes ticks before their time. Reading it costs a
round trip, so the offset between it and this process's clock is measured with each heartbeat
(halfway through the round trip) and added to the local clock in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class BrokerClock:
    def __init__(self, read: Callable[[], float]) -> None:
        self._read = read
        #: Seconds the broker's clock is ahead of this process's (negative: behind).
        self.offset = 0.0

    def now(self) -> float:
        """The broker's time now, as epoch seconds."""
        return time.time() + self.offset

    def measure(self) -> None:
        """Read the broker's clock once; raises the broker's errors when it cannot be read."""
        before = time.time()
        server = self._read()
        after = time.time()
        offset = server - (before + after) / 2
        # The reading happened somewhere in the round trip: an offset within half of it cannot
        # be told from none (both clocks the same machine's, say), and is not applied.
        self.offset = offset if abs(offset) > (after - before) / 2 else 0.0
