"""How the bench times a drain from outside, and the rates it derives.

Every job appends to a marker file that the bench polls; worker memory is sampled on a
slower clock, since reading a process tree's PSS costs milliseconds.
"""

from __future__ import annotations

#: Seconds between two reads of the marker file's size.
POLL = 0.002
#: Seconds between two samples of the workers' memory.
MEMORY_SAMPLE = 0.1
#: Seconds a worker gets to exit after TERM before the bench KILLs it.
STOP_GRACE = 30.0
#: Floor of the processing timeout; a run slower than ~50 jobs/s is broken, not slow.
MIN_TIMEOUT = 60.0


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
