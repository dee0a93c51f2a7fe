"""The broker interface: everything the client, the worker runtime and task tracking ask of
the store that holds the jobs. Two implementations: Redis (Sidekiq's keys and payloads,
``brokers.redis``) and SQL (one jobs table, ``brokers.sql``). Nothing above this module
knows which one it has; ``brokers.open_broker`` picks one by URL.

Payloads are the same JSON on both (``payload.dumps``), so a job's dict never depends on
where it was stored.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from asynctask import payload
from asynctask.brokers.checkpoints import Checkpoints
from asynctask.brokers.clock import BrokerClock
from asynctask.brokers.feeds import Feeds
from asynctask.brokers.fetcher import Fetcher, UnitOfWork
from asynctask.brokers.periodic import PeriodicStore
from asynctask.feeds import Feed
from asynctask.settings import Settings
from asynctask.tracking.outbox import Outbox
from asynctask.tracking.store import TrackingStore

if TYPE_CHECKING:
    from sqlalchemy import Connection

#: The job sets a scheduled/retry poller moves due jobs from.
DueSet = Literal["retry", "schedule"]


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
    at once (see ``tasks.creation.create_task``).

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
        entries: payload.PushEntries,
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
