"""The broker interface: everything the client, the worker runtime and task tracking ask of
the store that holds the jobs. Two implementations: Redis (Sidekiq's keys and payloads,
``brokers.redis``) and SQL (one jobs table, ``brokers.sql``). Nothing above this module
knows which one it has; ``brokers.open_broker`` picks one by URL.

Payloads are the same JSON on both (``payload.dumps``), so a job's dict never depends on
where it was stored.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from asynctask import payload
from asynctask.brokers.checkpoints import Checkpoints
from asynctask.brokers.clock import BrokerClock
from asynctask.brokers.feeds import Feeds
from asynctask.brokers.pacing import CLAIM_WAIT, ClaimPacing
from asynctask.brokers.periodic import PeriodicStore
from asynctask.feeds import FEED_FIELD, Feed
from asynctask.payload import JobDict
from asynctask.settings import QueueSpec, Settings
from asynctask.tracking.outbox import Outbox
from asynctask.tracking.store import TrackingStore

if TYPE_CHECKING:
    from sqlalchemy import Connection

logger = logging.getLogger("asynctask.fetch")


#: The job sets a scheduled/retry poller moves due jobs from.
DueSet = Literal["retry", "schedule"]


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


@dataclass(frozen=True, slots=True)
class Beat:
    """One heartbeat of a worker process (Sidekiq's process record)."""

    identity: str
    #: The process's static description (hostname, pid, queues, concurrency...), as JSON.
    info: str
    busy: int
    quiet: bool
    rss_kb: int
    #: Counts since the last beat, added to the lifetime and daily totals.
    processed: int
    failed: int
    #: Thread id -> JSON of the job it runs (``{"queue", "payload", "run_at"}``).
    work: dict[str, str]
    #: The longest its event loop was late since the previous beat, in microseconds (0 for
    #: a process that runs no async job).
    loop_lag_us: int = 0


@dataclass(frozen=True, slots=True)
class BeatReply:
    #: A signal sent to this process from outside (TSTP, TERM, TTIN), if any.
    signal: str | None
    #: Whether the process record was live when this beat renewed it. False after an outage
    #: or a stall longer than ``process_ttl``: others may have taken back its claims.
    was_live: bool


class ProcessRecords(Protocol):
    """What a worker's heartbeat asks of the broker: its process record and counts."""

    @property
    def errors(self) -> tuple[type[BaseException], ...]: ...

    def beat(self, beat: Beat) -> BeatReply: ...

    def clear_process(self, identity: str, processed: int, failed: int) -> None: ...


class DueJobs(Protocol):
    """What the scheduled/retry poller asks of the broker: due jobs moved to their queues."""

    @property
    def errors(self) -> tuple[type[BaseException], ...]: ...

    def enqueue_due(self, due_set: DueSet, rewrite: Callable[[bytes], payload.JobDict | None]) -> int: ...

    def process_count(self) -> int: ...

    def kill_unparseable(
        self, unit: UnitOfWork | None, raw: bytes, queue: str, reason: str, jid: str | None = None
    ) -> None: ...


class Staging(ABC):
    """One task's jobs, written batch by batch where no worker takes them, then published all
    at once (see ``tasks.operations.create_task``).

    ``encode`` (no I/O; refuses a job over the size limit), then ``write`` per batch inside
    the task's SQL transaction, ``publish`` once after it committed, or ``discard``.
    """

    #: Whether the jobs become claimable by the task's own commit (they are rows of its
    #: database): the task is then ready when it commits, and ``publish`` cannot lose them.
    commits_with_task: ClassVar[bool] = False

    @abstractmethod
    def encode(self, jobs: Sequence[payload.JobDict]) -> Any: ...

    @abstractmethod
    def write(self, encoded: Any, connection: Connection) -> None: ...

    @abstractmethod
    def publish(self) -> int: ...

    @abstractmethod
    def discard(self) -> None: ...


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


class Broker(ABC):
    """The broker proper: pushing, claiming and settling jobs, the retry, schedule and dead
    sets, and the worker process records. Task tracking and cancellation live in the store it
    offers (``tracking``), written on the same connections."""

    settings: Settings
    #: Where this broker writes tracking transitions and marks tasks cancelled.
    tracking: TrackingStore
    #: The feeds of fed tasks (``create_task(..., parallel=...)``).
    feeds: Feeds
    #: The periodic schedules and the step that enqueues each of their ticks once.
    periodic: PeriodicStore
    #: Resumable jobs' checkpoints and stop requests.
    checkpoints: Checkpoints
    #: Errors that mean this broker's store is unreachable or refused a command: the worker
    #: logs them and tries again, it never dies of them.
    errors: ClassVar[tuple[type[BaseException], ...]]
    #: Whether its store may lose every job at once and come back empty (a server that keeps
    #: them in memory, restarted): its workers then watch for that (``asynctask.worker.lost``).
    loses_data_on_restart: ClassVar[bool] = False
    #: Which backend it is (``brokers.read_backend`` and ``brokers.as_redis`` go by it, so
    #: that asking never loads another backend's driver).
    backend: ClassVar[Literal["redis", "sql"]]

    @abstractmethod
    def close(self) -> None:
        """Release connections this broker opened."""

    @abstractmethod
    def ping(self) -> None:
        """Raise one of ``errors`` if the store cannot be reached."""

    @abstractmethod
    def server_time(self) -> float:
        """The store's clock now, as epoch seconds (one round trip; ``clock`` keeps it)."""

    @cached_property
    def clock(self) -> BrokerClock:
        """What due times are compared with: the store's clock (see ``brokers.clock``)."""
        return BrokerClock(self.server_time)

    @abstractmethod
    def push(
        self,
        entries: Sequence[tuple[payload.JobDict, float | None]],
        *,
        transitions: Sequence[str] = (),
        atomic: bool = False,
    ) -> list[str]:
        """Enqueue jobs (an entry's run-at time in the future schedules it) in one round trip,
        writing the tracking ``transitions`` first. ``atomic``: all or none.

        Returns the jid the store holds for each entry, in order: the job's own, or, for a
        unique job whose key was taken, the holder's (and nothing was stored for it)."""

    @abstractmethod
    def staging(self, task_id: str, feed: Feed | None = None, share: str | None = None) -> Staging:
        """Where ``create_task`` stages a task's jobs. With a ``feed``, publishing holds them
        in the task's feed and releases the first of them (see ``brokers.feeds``). ``share``:
        the share of a fair queue the jobs wait in (``fairness.share_of``); None, the task's own."""

    @abstractmethod
    def fetcher(self, identity: str, outbox: Outbox | None = None) -> Fetcher: ...

    @abstractmethod
    def jobs_ahead(self, queue: str, share: str, waiting: int, earlier: int) -> int | None:
        """About how many jobs of ``queue`` start before the next of a task with ``waiting`` jobs
        not started, in ``share`` (``fairness.share_of``), behind ``earlier`` jobs of its share's
        earlier tasks; None if none of the queue's jobs is ready to run. An estimate, read at a
        cost that does not grow with a fair queue; a FIFO queue counts its jobs up to a bound."""

    @abstractmethod
    def retry_at(
        self, unit: UnitOfWork, job: payload.JobDict, at: float, outbox: Outbox | None = None
    ) -> None:
        """Move a failed job to the retry set (due at ``at``) and release it, atomically with
        the outbox's transitions, so they are stored before any process can retry it."""

    @abstractmethod
    def kill(self, unit: UnitOfWork | None, encoded: str) -> None:
        """Add a job to the dead set (trimmed by age and count, as Sidekiq does) and release it."""

    @abstractmethod
    def park(self, unit: UnitOfWork, encoded: str, outbox: Outbox | None = None) -> None:
        """Move a claimed job that was stopped to the ``stopped`` set (scored now, never
        trimmed) as ``encoded``, and release it, atomically with the outbox's transitions. It
        ends as a dead job ends: its concurrency slot, unique key and feed slot are freed."""

    @abstractmethod
    def release(self, unit: UnitOfWork) -> None:
        """Drop a claimed job without keeping it anywhere (done, skipped or discarded)."""

    @abstractmethod
    def enqueue_due(self, due_set: DueSet, rewrite: Callable[[bytes], payload.JobDict | None]) -> int:
        """Move every due job of the set to its queue; return how many.

        ``rewrite`` turns a stored payload into the job to enqueue, or None to drop it.
        """

    @abstractmethod
    def recover_orphans(self, identity: str) -> int:
        """Give the jobs claimed by dead processes (heartbeat expired) back to their queues."""

    @abstractmethod
    def requeue_process(self, identity: str) -> int:
        """Worker process ``identity`` is known dead (its watchdog saw it go): give every job
        it held back to its queue and remove its record at once, rather than after its
        heartbeat expires; return how many jobs went back."""

    @abstractmethod
    def process_count(self) -> int:
        """How many worker processes are alive (scales the scheduled poll interval)."""

    @abstractmethod
    def beat(self, beat: Beat) -> BeatReply:
        """Write one heartbeat (stats, busy threads, the process record); return a signal sent
        to this process from outside (TSTP, TERM, TTIN), if any, and whether its record was
        still live."""

    @abstractmethod
    def clear_process(self, identity: str, processed: int, failed: int) -> None:
        """A process is leaving: flush its last counts and remove its record."""

    def kill_unparseable(
        self, unit: UnitOfWork | None, raw: bytes, queue: str, reason: str, jid: str | None = None
    ) -> None:
        """Bury a payload that cannot be handled as it is, keeping its bytes exactly in a valid
        dead-set entry (``payload.unparseable``; ``jid``: the payload's own, if it has one)."""
        self.kill(unit, payload.dumps_storable(payload.unparseable(raw, queue, reason, jid)))

    def due_payload(self, member: bytes, job: payload.JobDict, now: float) -> str | None:
        """What ``enqueue_due`` pushes for ``job``, rewritten from the due ``member``: the job
        with a fresh ``enqueued_at``, as text. None once ``member`` is buried, because the
        job cannot be written back as JSON (a float beyond JSON's range, read from a literal
        such as ``1e999``): kept, it would fail every pass of the poller."""
        job["enqueued_at"] = now
        try:
            return payload.dumps_storable(job)
        except (ValueError, TypeError, RecursionError) as exc:
            reason = f"cannot be enqueued again, as it cannot be written as JSON: {exc}"
            self.kill_unparseable(None, member, "default", reason, payload.valid_jid(job.get("jid")))
            return None
