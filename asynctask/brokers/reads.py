"""What the read model asks of the store that holds the jobs, whichever store it is.

``Queue``, the job sets, ``ProcessSet``, ``WorkSet`` and ``Stats`` call these primitives and
never talk to Redis or SQL themselves. Each broker implements them beside itself:
``brokers.redis.reads`` (Sidekiq's keys) and ``brokers.sql.reads`` (the SQL broker's tables);
``brokers.read_backend`` gives a broker's own, and ``api.reader`` opens one from a URL.

Records stay backend-neutral: a stored job is its exact bytes plus an opaque handle the
backend gave out with it (nothing on Redis, where the bytes and the score name a member; the
row id in SQL). Every action on an entry acts only if that entry is still where it was read,
so a click racing the poller or another click moves a job once or not at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

from asynctask.brokers.periodic import PeriodicStore

#: The job sets, by their Sidekiq names.
SetName = Literal["schedule", "retry", "dead", "stopped"]


@dataclass(frozen=True, slots=True)
class Stored:
    """A job in a queue: its bytes as stored and the backend's handle on it."""

    raw: bytes
    ref: int | None = None


@dataclass(frozen=True, slots=True)
class Scored:
    """A job in a set: its bytes, its score (when it runs, is retried or died) and handle."""

    raw: bytes
    score: float
    ref: int | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """A set entry to enqueue: the entry as read, the payload to enqueue, and its queue."""

    entry: Scored
    replacement: str
    queue: str


@dataclass(frozen=True, slots=True)
class BusyKey:
    """A concurrency key with jobs holding its slots or waiting in its line."""

    key: str
    #: The most of its jobs that may hold slots at once (the latest pushed job's limit).
    limit: int
    #: The jids of the jobs holding its slots: queued to run, running, or awaiting a retry.
    holders: list[str]
    #: How many of its jobs wait in its line for a slot.
    waiting: int


@dataclass(frozen=True, slots=True)
class ProcessRecord:
    """A live process's last heartbeat, fields already converted (unreadable ones are 0/None)."""

    identity: str
    #: The ``info`` JSON as stored (parsed by the caller).
    info: str
    busy: int
    beat: float | None
    quiet: bool
    rss: int
    rtt_us: int
    loop_lag_us: int


@dataclass(frozen=True, slots=True)
class WorkEntry:
    """One busy thread of a live process: the value is the JSON its heartbeat stored."""

    identity: str
    thread_id: str
    value: bytes | str


@dataclass(frozen=True, slots=True)
class Snapshot:
    processed: int
    failed: int
    scheduled_size: int
    retry_size: int
    dead_size: int
    #: Jobs stopped by ``stop_job``, waiting for a resume.
    stopped_size: int
    processes_size: int
    workers_size: int
    default_queue_latency: float
    #: Queue name -> size, biggest first (then by name).
    queues: dict[str, int]
    #: Times a worker found that Redis had lost its data (``worker.lost``); 0 on SQL brokers.
    data_losses: int = 0


@dataclass(frozen=True, slots=True)
class Backlog:
    #: Transitions waiting for the flusher.
    entries: int
    #: Seconds the oldest of them has waited (0 when none waits).
    age: float


class ReadBackend(ABC):
    """The primitives of the read model over one store."""

    @property
    @abstractmethod
    def periodic(self) -> PeriodicStore:
        """The periodic schedules, read and paused through the broker's own store."""

    # Queues. A queue holds the jobs waiting to be fetched; jobs a worker holds are not in it.

    @abstractmethod
    def queue_key(self, name: str) -> str:
        """Where the queue lives in the store (a queue's identity; shown in reprs)."""

    @abstractmethod
    def queue_names(self) -> list[str]:
        """Every known queue, the paused ones included (even empty), sorted by name."""

    @abstractmethod
    def queue_size(self, name: str) -> int: ...

    @abstractmethod
    def queue_latency(self, name: str) -> float:
        """Seconds the oldest waiting job has waited; 0 when empty or when it cannot say."""

    @abstractmethod
    def queue_rows(self, name: str, page_size: int) -> Iterator[Stored]:
        """The queue's jobs, the one fetched last first, read ``page_size`` at a time; each job
        once even while jobs are deleted, fetched or pushed meanwhile."""

    @abstractmethod
    def queue_candidates(self, name: str, jid: str) -> Iterator[Stored]:
        """Jobs of the queue that may have this jid (the caller checks each)."""

    @abstractmethod
    def queue_delete(self, name: str, job: Stored) -> bool:
        """Remove this job from the queue; False if it was no longer there."""

    @abstractmethod
    def queue_clear(self, name: str) -> int:
        """Delete every job of the queue (and forget it where names are kept); return how many."""

    @abstractmethod
    def queue_pause(self, name: str, paused: bool) -> None:
        """Pause the queue (no worker takes its jobs; pushes still land in it), or resume it
        (``paused`` False: idle workers are woken where the store can wake them); either is
        a no-op if the queue already is so."""

    @abstractmethod
    def queue_paused(self, name: str) -> bool: ...

    # Sets, ordered by score. Iteration is by descending score, as in Sidekiq.

    @abstractmethod
    def set_key(self, name: SetName) -> str: ...

    @abstractmethod
    def set_size(self, name: SetName) -> int: ...

    @abstractmethod
    def set_rows(self, name: SetName, page_size: int) -> Iterator[Scored]:
        """Entries by descending score, ``page_size`` at a time; each page continues after the
        last entry read, whatever was added or removed meanwhile."""

    @abstractmethod
    def set_page(self, name: SetName, start: int, count: int) -> list[Scored]:
        """``count`` entries from rank ``start``, by ascending score."""

    @abstractmethod
    def set_scan(self, name: SetName, text: str) -> Iterator[Scored]:
        """Entries whose stored JSON contains ``text``, case included."""

    @abstractmethod
    def set_candidates(self, name: SetName, jid: str) -> Iterator[Scored]:
        """Entries that may have this jid (the caller checks each)."""

    @abstractmethod
    def set_range(self, name: SetName, low: float, high: float) -> list[Scored]:
        """Entries scored in ``[low, high]``, by ascending score."""

    @abstractmethod
    def set_delete(self, name: SetName, entry: Scored) -> bool:
        """Remove this entry; False if it was no longer in the set with that score."""

    @abstractmethod
    def set_clear(self, name: SetName) -> int:
        """Delete every entry; return how many there were."""

    @abstractmethod
    def set_enqueue(self, name: SetName, moves: Sequence[Move], now: float) -> int:
        """Move entries still in the set to their queues (with their replacement payload),
        atomically per entry; return how many moved."""

    @abstractmethod
    def set_kill(self, name: SetName, entries: Sequence[Scored], now: float) -> int:
        """Move entries still in the set to the dead set as they are (scored ``now``), then trim
        it by the settings' dead_timeout and dead_max_jobs; return how many moved."""

    @abstractmethod
    def dead_add(self, encoded: bytes | str, now: float) -> None:
        """Add a job to the dead set (scored ``now``) and trim it as ``set_kill`` does."""

    # Stopping jobs that wait: moved to the ``stopped`` set without running.

    @abstractmethod
    def queue_park(self, name: str, job: Stored, encoded: str, now: float) -> bool:
        """Move this job from the queue to the ``stopped`` set as ``encoded`` (scored ``now``),
        ending it as ``queue_delete`` does; False if it was no longer there."""

    @abstractmethod
    def set_park(self, name: SetName, entry: Scored, encoded: str, now: float) -> bool:
        """Move this entry of ``schedule`` or ``retry`` to the ``stopped`` set as ``encoded``
        (scored ``now``), ending it as ``set_delete`` does; False if it was no longer there."""

    # Concurrency keys.

    @abstractmethod
    def busy_keys(self, limit: int) -> list[BusyKey]:
        """Up to ``limit`` keys with jobs holding slots or waiting, those with most waiting first."""

    # Processes and their busy threads.

    @abstractmethod
    def processes(self) -> list[ProcessRecord]:
        """Every live process, sorted by identity."""

    @abstractmethod
    def process(self, identity: str) -> ProcessRecord | None:
        """The live process with this identity, or None."""

    @abstractmethod
    def signal(self, identity: str, name: str) -> None:
        """Queue a signal (TSTP, TERM, TTIN) for the process to pop at its next heartbeat."""

    @abstractmethod
    def cleanup_processes(self) -> int:
        """Forget processes whose heartbeat expired; return how many."""

    @abstractmethod
    def work(self) -> list[WorkEntry]:
        """The busy threads of every live process, as of their last heartbeat."""

    @abstractmethod
    def busy(self) -> int:
        """Busy threads over all live processes, as they last reported them."""

    # Counters.

    @abstractmethod
    def stats(self, default_queue: str) -> Snapshot:
        """Every dashboard number in a constant number of round trips."""

    @abstractmethod
    def reset_stats(self, names: Sequence[str]) -> None:
        """Set these lifetime counters (``processed``, ``failed``) to 0."""

    @abstractmethod
    def history(self, days: Sequence[date]) -> tuple[list[int], list[int]]:
        """Processed and failed counts of each day (0 for a day without a count), in order."""

    @abstractmethod
    def tracking_backlog(self) -> Backlog | None:
        """Tracked transitions written but not yet applied to the tracking database; None when
        the broker writes them in the job's own transaction (nothing waits)."""
