"""How many jobs a worker process claims at once, and how many of its claims are under way.

A claim asks for as many jobs as the process's threads run in one claim's round trip (both
measured here), at most ``PREFETCH_LIMIT`` per thread and at least one per waiting thread.
Jobs much shorter than a round trip come in batches, run before a claim could bring more: the
process pays a round trip, and its client's work, per batch rather than per thread. Jobs as
long as a round trip or longer are claimed one per waiting thread, so that a process does not
take jobs that another process's idle threads could start sooner. The measure is of the jobs
run so far: after many short jobs, the first claim of a burst of long ones may still take a
batch of them. (Claiming one job per waiting thread while jobs were plentiful held one process
x 10 threads of no-op jobs on Redis to 32,500 jobs/s and two processes to 40,000; batching
them too gave 42,500 and 73,000.)

At most ``CLAIMS_UNDER_WAY`` claims are under way; the other threads that find the buffer
empty wait for the jobs those bring, and their acknowledgements go with the next claim, many at
once. Without that bound, while jobs are scarce (the slots of a fed task are all out, or the
queues are nearly empty), many claims would split the few jobs there are, each coming back with
one or two, and a fed task's slots would stay out meanwhile: a job's slot is freed only when a
claim carries its acknowledgement, and the jobs in replies on their way and in the buffer hold
slots too. While jobs are plentiful, each of many claims would bring a batch, and the process
would hold far more jobs than it runs in a round trip.

A batch only while jobs flow through the process: the claim acknowledges jobs, or the claim
before it found some. A claim of idle threads after one that found the queues empty asks for
its waiting threads only: the jobs that come next are new ones, whose length the past jobs do
not tell. One process whose threads had run instant jobs took all six long jobs pushed next
into its buffer, and the other process's idle threads had none to run until those ended.
(Requiring both made fed drains on Redis about a fifth slower: after a claim that found the
feed's slots all out, the next one, carrying the ends that free them, must still batch.)
"""

from __future__ import annotations

from dataclasses import dataclass

#: Claims a process keeps under way at once.
CLAIMS_UNDER_WAY = 2
#: How many times its threads a process claims at most in one claim.
PREFETCH_LIMIT = 6
#: Seconds a thread waits at most for the claims under way before it looks again (a claim
#: that returns wakes it sooner).
CLAIM_WAIT = 0.05
#: Weight of the newest measurement in the running averages.
SMOOTHING = 0.1


@dataclass
class ClaimPacing:
    """The state of one process's claims; its caller holds the fetcher's lock."""

    #: Whether the last claim found any job.
    found_any: bool = False
    #: Claims under way now.
    claiming: int = 0
    #: Whether jobs come in batches: they run shorter than a claim's round trip, and the last
    #: claim that found any found more than one.
    batched: bool = False
    #: Running averages: seconds from handing a job to a thread to that thread's next
    #: fetch, and seconds of a claim's round trip.
    job_seconds: float = 0.0
    claim_seconds: float = 0.0

    def must_wait(self) -> bool:
        """Whether a thread that found the buffer empty waits for the claims under way."""
        return self.claiming >= CLAIMS_UNDER_WAY

    def wanted(self, waiting: int, threads: int, acknowledging: bool) -> int:
        """How many jobs a claim asks for: ``waiting`` threads are inside fetch without one, of
        ``threads`` in all; ``acknowledging``: the claim carries finished jobs."""
        if not (self.found_any or acknowledging) or self.job_seconds <= 0:
            return waiting
        return max(waiting, int(threads * min(PREFETCH_LIMIT, self.claim_seconds / self.job_seconds)))

    def woken(self) -> None:
        """A job came to a thread that waited on empty queues: jobs come one at a time."""
        self.batched = False

    def ran(self, seconds: float) -> None:
        self.job_seconds = _averaged(self.job_seconds, seconds)

    def claimed(self, found: int, seconds: float) -> None:
        self.found_any = found > 0
        self.claim_seconds = _averaged(self.claim_seconds, seconds)
        if found:
            # A claim that found nothing says nothing of the jobs: the threads are idle.
            self.batched = found > 1 and 0 < self.job_seconds < self.claim_seconds


def _averaged(average: float, value: float) -> float:
    return value if average <= 0 else average + SMOOTHING * (value - average)
