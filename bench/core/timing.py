"""How the bench times a drain from outside, and the rates it derives.

Every job appends to a marker file that the bench polls; worker memory is sampled on a
slower clock, since reading a process tree's PSS costs milliseconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Seconds between two reads of the marker file's size.
POLL = 0.002
#: Seconds between two samples of the workers' memory.
MEMORY_SAMPLE = 0.1
#: Seconds a worker gets to exit after TERM before the bench KILLs it.
STOP_GRACE = 30.0
#: Floor of the processing timeout; a run slower than ~50 jobs/s is broken, not slow.
MIN_TIMEOUT = 60.0


def drain_timeout(jobs: int) -> float:
    """How long a drain of ``jobs`` may take before it counts as broken."""
    return max(MIN_TIMEOUT, jobs / 50)


@dataclass(frozen=True)
class MarkerPoll:
    """One read of a drain's marker file: when, and how many jobs were done by then."""

    now: float
    done: int
    #: When a read first found a job done (0 before).
    first: float
    #: This read is the first to find a job done.
    started: bool
    #: This read found every job done: the last one.
    last: bool


def poll_marker(marker: Path, jobs: int) -> Iterator[MarkerPoll]:
    """Read the size of ``marker`` every ``POLL`` seconds until it holds ``jobs`` bytes.

    The caller samples and checks what it watches between two reads, and raises to stop.
    """
    first = 0.0
    while True:
        done = os.stat(marker).st_size
        now = time.monotonic()
        started = bool(done) and not first
        if started:
            first = now
        yield MarkerPoll(now, done, first, started, last=done >= jobs)
        if done >= jobs:
            return
        time.sleep(POLL)


class DrainRates:
    """Rates of a drain whose phases a run measured: ``steady_s`` (first job done to last)
    and ``total_s`` (spawn to last)."""

    jobs: int
    steady_s: float
    total_s: float

    @property
    def steady_rate(self) -> float:
        return self.jobs / self.steady_s if self.steady_s > 0 else 0.0

    @property
    def total_rate(self) -> float:
        return self.jobs / self.total_s if self.total_s > 0 else 0.0
