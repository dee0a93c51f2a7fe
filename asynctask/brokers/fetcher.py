"""A worker process's claims on jobs (``Fetcher``), shared by its threads, and the unit of
work each claimed job is (``UnitOfWork``): the claim engine every broker runs its own claims in.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from asynctask.brokers.pacing import CLAIM_WAIT, ClaimPacing
from asynctask.feeds import FEED_FIELD
from asynctask.payload import JobDict
from asynctask.settings import QueueSpec
from asynctask.tracking.outbox import Outbox

logger = logging.getLogger("asynctask.fetch")


# Not frozen (a frozen dataclass is built three times slower, and one is built for every job
# claimed), but hashed by value all the same: none is changed once built.
@dataclass(slots=True, unsafe_hash=True)
class UnitOfWork:
    """A claimed job: its queue, its bytes exactly as stored, and the backend's handle on it
    (the in-flight list key on Redis, the row id in SQL)."""

    queue: str
    payload: bytes
    ref: str | int
    #: The feed (task id) and jid of a fed job whose end frees nothing else (no concurrency or
    #: unique key), read by the worker that decoded the payload, so that the broker can free
    #: the feed slot without decoding it again. Not part of the unit's identity.
    fed: tuple[str, str] | None = field(default=None, compare=False)

    def decoded(self, job: JobDict) -> UnitOfWork:
        """This unit, knowing ``job`` (its payload decoded): ``fed`` set for such a fed job."""
        feed = job.get(FEED_FIELD)
        # Task ids are ASCII; any other text (a lone surrogate would not even encode, failing
        # every claim that carries it) leaves the broker to decode the payload as before.
        if not isinstance(feed, str) or not feed.isascii() or "concurrency_key" in job or "unique_key" in job:
            return self
        return UnitOfWork(self.queue, self.payload, self.ref, (feed, job["jid"]))


class Fetcher(ABC):
    """A worker process's claims on jobs, shared by its processor threads.

    One round trip acknowledges every job finished since the last one, writes the pending
    tracking transitions and claims jobs for the threads waiting (a batch of them when jobs are
    short, ``pacing``) into a buffer the threads take from. A
    claimed job stays claimed by this process (never lost) until it is acknowledged, moved to
    the retry or dead set, or given back.

    A claim this process holds but no thread will ever run (the reply to the claim was lost
    in an outage, or the thread that had it died) is found by ``reconcile`` and given back.
    """

    def __init__(self, identity: str, queues: Sequence[QueueSpec], outbox: Outbox | None) -> None:
        self.identity = identity
        self.queue_names = list(dict.fromkeys(q.name for q in queues))
        self.strict = all(q.weight == 0 for q in queues)
        #: Whether each queue serves its waiting jobs in turn by share (``asynctask.fairness``).
        self.fair = {name: all(q.fair for q in queues if q.name == name) for name in self.queue_names}
        # Sidekiq's weighting: a queue appears max(weight, 1) times; shuffle, then keep first sightings.
        self._weighted = [q.name for q in queues for _ in range(max(q.weight, 1))]
        self.outbox = outbox if outbox is not None else Outbox()
        #: Opaque token from the last claim that changes whenever a task is cancelled.
        self.cancel_generation: bytes = b"0"
        self._lock = threading.Lock()
        #: Notified when the buffer receives jobs: threads of a fetcher whose waiting happens in
        #: this process (the SQL broker's) sleep on it and take them.
        self._ready = threading.Condition(self._lock)
        self._buffer: deque[UnitOfWork] = deque()
        self._acks: list[UnitOfWork] = []
        #: Threads inside ``fetch`` without a job yet: how many jobs one claim should take.
        self._waiting = 0
        #: The job each processor thread was last handed, and when (until it asks for the next one).
        self._handed: dict[threading.Thread, tuple[UnitOfWork, float]] = {}
        #: Jobs handed on by their thread to the event loop (async jobs), until they are settled.
        self._detached: Counter[UnitOfWork] = Counter()
        #: How many jobs a claim asks for and how many claims are under way at once.
        self._pacing = ClaimPacing()
        #: Round trips under way (numbered as they start), with the acknowledgements they carry.
        self._round_trips: dict[int, list[UnitOfWork]] = {}
        self._round_trip_numbers = itertools.count(1)
        self._last_round_trip = 0
        #: Claims that no thread held at the last ``reconcile``, by the last round trip
        #: started when each was first seen unheld (oldest first).
        self._suspects: dict[int, Counter[UnitOfWork]] = {}

    def queue_order(self) -> list[str]:
        """The order to try the queues in for one claim: as listed when strict, else weighted
        random (a queue with weight 3 comes first three times as often as one with weight 1)."""
        if self.strict:
            return self.queue_names
        shuffled = self._weighted[:]
        random.shuffle(shuffled)
        return list(dict.fromkeys(shuffled))

    @abstractmethod
    def register(self) -> None:
        """Make this process's claims recoverable by others if it dies (before any fetch)."""

    @abstractmethod
    def claim(self, wanted: int, acks: list[UnitOfWork], transitions: list[str]) -> list[UnitOfWork]:
        """Acknowledge ``acks``, write ``transitions``, then claim up to ``wanted`` jobs, atomically."""

    @abstractmethod
    def wait(self, block_on: int) -> UnitOfWork | None:
        """Every queue was empty: wait (up to the fetch timeout) for a job, claiming it if one
        comes. ``block_on`` spreads the threads over the queues."""

    @abstractmethod
    def settle(self, acks: list[UnitOfWork], transitions: list[str]) -> None:
        """Acknowledge ``acks`` and write ``transitions``, atomically, claiming nothing."""

    @abstractmethod
    def requeue(self, units: Sequence[UnitOfWork]) -> int:
        """Give claimed jobs back to their queues, to be fetched next, atomically; a job this
        process no longer holds is left alone. Returns how many went back."""

    @abstractmethod
    def held(self) -> list[UnitOfWork]:
        """Every job the store says this process holds now."""

    @abstractmethod
    def requeue_all(self, *, forget: bool) -> int:
        """Give back every job this process holds (shutdown); ``forget``: it leaves for good.

        Finished jobs must be acknowledged first (``flush_acks``), or they would run again.
        """

    def fetch(self, ack: UnitOfWork | None, block_on: int) -> UnitOfWork | None:
        """Queue ``ack`` (a finished job) for acknowledgement and return the next job, or None."""
        thread = threading.current_thread()
        with self._lock:
            handed = self._handed.pop(thread, None)
            if handed is not None:
                self._pacing.ran(time.monotonic() - handed[1])
            if ack is not None:
                self._acks.append(ack)
            self._waiting += 1
            while not self._buffer and self._pacing.must_wait():
                self._ready.wait(CLAIM_WAIT)
            if self._buffer:
                self._waiting -= 1
                return self._hand(thread, self._buffer.popleft())
            acks, self._acks = self._acks, []
            wanted = self._pacing.wanted(self._waiting, self._waiting + len(self._handed), bool(acks))
            number = self._begin_round_trip(acks)
            self._pacing.claiming += 1
        try:
            started = time.monotonic()
            units: list[UnitOfWork] = []
            try:
                with self.outbox.draining(acknowledging=bool(acks)) as transitions:
                    units = self.claim(wanted, acks, transitions)
            finally:
                with self._lock:
                    self._pacing.claiming -= 1
                    self._pacing.claimed(len(units), time.monotonic() - started)
                    # A thread waiting for this claim may claim now, if it brought too few.
                    self._ready.notify()
            found = units[0] if units else self.wait(block_on)
            with self._lock:
                if not units and found is not None:
                    self._pacing.woken()
                if len(units) > 1:
                    # Claimed for every thread inside fetch(), waiting ones included: wake them,
                    # or the jobs would wait for this thread to come back.
                    self._buffer.extend(units[1:])
                    self._ready.notify(len(units) - 1)
                return None if found is None else self._hand(thread, found)
        except BaseException:
            with self._lock:
                self._acks[:0] = acks
            raise
        finally:
            with self._lock:
                self._waiting -= 1
                del self._round_trips[number]

    def jobs_come_in_batches(self) -> bool:
        """Whether the jobs run shorter than a claim's round trip, several found by each claim."""
        return self._pacing.batched

    def _hand(self, thread: threading.Thread, unit: UnitOfWork) -> UnitOfWork:
        """Record ``unit`` as ``thread``'s, and when (hold ``_lock``)."""
        self._handed[thread] = (unit, time.monotonic())
        return unit

    def detach(self, unit: UnitOfWork) -> None:
        """The calling thread handed ``unit`` on (to the event loop): it is held until
        ``reattached``, whatever the thread fetches meanwhile."""
        thread = threading.current_thread()
        with self._lock:
            handed = self._handed.pop(thread, None)
            if handed is not None:
                self._pacing.ran(time.monotonic() - handed[1])
            self._detached[unit] += 1

    def reattached(self, unit: UnitOfWork, *, ack: bool) -> None:
        """A detached ``unit`` is settled: queued for acknowledgement (``ack``), or settled
        already (moved to retry, buried, left for the shutdown's requeue)."""
        with self._lock:
            self._detached[unit] -= 1
            if not self._detached[unit]:
                del self._detached[unit]
            if ack:
                self._acks.append(unit)

    def acknowledge(self, unit: UnitOfWork) -> None:
        """Acknowledge ``unit`` and any others waiting, now."""
        with self._lock:
            self._acks.append(unit)
        self.flush_acks()

    def flush_acks(self) -> None:
        """Acknowledge every finished job now (before a shutdown requeues what is left)."""
        with self._lock:
            acks, self._acks = self._acks, []
        try:
            with self._round_trip(acks), self.outbox.draining(acknowledging=bool(acks)) as transitions:
                if acks or transitions:
                    self.settle(acks, transitions)
        except BaseException:
            with self._lock:
                self._acks[:0] = acks
            raise

    def reconcile(self) -> int:
        """Give back the jobs this process holds that none of its threads has or will have;
        return how many went back. Called at every heartbeat.

        A job is given back when the store has listed it as this process's at every call
        since one where no thread had it, the buffer did not hold it and no acknowledgement
        carried it, and every round trip under way at that first call has returned since: a
        claim's reply still on its way is never mistaken for a lost one. Round trips that
        outlast a heartbeat (a thread blocked waiting for jobs) only delay the give-back:
        each suspect keeps the mark of the call that first saw it.
        """
        stored = Counter(self.held())
        with self._lock:
            for thread in [t for t in self._handed if not t.is_alive()]:
                del self._handed[thread]
            known = Counter(
                itertools.chain(
                    self._buffer,
                    self._acks,
                    (unit for unit, _ in self._handed.values()),
                    self._detached.elements(),
                    *self._round_trips.values(),
                )
            )
            oldest_under_way = min(self._round_trips, default=self._last_round_trip + 1)
            mark = self._last_round_trip
        unknown = stored - known
        stuck: Counter[UnitOfWork] = Counter()
        suspects: dict[int, Counter[UnitOfWork]] = {}
        for first_seen, units in self._suspects.items():
            still = units & unknown
            unknown -= still
            if first_seen < oldest_under_way:
                stuck += still
            elif still:
                suspects[first_seen] = still
        if unknown:
            # No round trip since the last call: the mark is the one of suspects seen then.
            suspects[mark] = suspects.get(mark, Counter()) + unknown
        self._suspects = suspects
        if not stuck:
            return 0
        moved = self.requeue(list(stuck.elements()))
        if moved:
            logger.warning(
                "gave back %d claimed job(s) that no thread was running (a lost reply or a dead thread)",
                moved,
                extra={"fields": {"identity": self.identity}},
            )
        return moved

    def _begin_round_trip(self, acks: list[UnitOfWork]) -> int:
        """Number a round trip that may claim jobs or carries ``acks`` (hold ``_lock``)."""
        number = self._last_round_trip = next(self._round_trip_numbers)
        self._round_trips[number] = acks
        return number

    @contextmanager
    def _round_trip(self, acks: list[UnitOfWork]) -> Iterator[None]:
        with self._lock:
            number = self._begin_round_trip(acks)
        try:
            yield
        finally:
            with self._lock:
                del self._round_trips[number]

    @abstractmethod
    def interrupt(self) -> None:
        """The process is going quiet for good: threads waiting for new jobs may return now
        rather than at the fetch timeout."""

    def requeue_buffered(self) -> int:
        """Give back the claimed jobs no thread has started (the process is going quiet)."""
        with self._lock:
            units = list(self._buffer)
            self._buffer.clear()
        return self.requeue(units)

    def drop_buffer(self) -> None:
        with self._lock:
            self._buffer.clear()
