"""Stats: the dashboard numbers (Sidekiq's ``Sidekiq::Stats``) and the daily history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Generic, Self, TypeVar, cast, overload

from asynctask.api.reader import Reader
from asynctask.brokers.reads import Backlog, Snapshot

#: Queue whose latency the dashboard shows, as in Sidekiq.
DEFAULT_QUEUE = "default"

N = TypeVar("N", int, float)


@dataclass(frozen=True, slots=True)
class History:
    """Per-day counts, newest day first; days without a key count 0."""

    processed: dict[date, int]
    failed: dict[date, int]


class _SnapshotNumber(Generic[N]):
    """A number of the last snapshot ``Stats`` read, named as in it (and as Sidekiq's ``Stats``
    names it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, stats: None, owner: type) -> Self: ...

    @overload
    def __get__(self, stats: Stats, owner: type) -> N: ...

    def __get__(self, stats: Stats | None, owner: type) -> Self | N:
        if stats is None:
            return self
        return cast(N, getattr(stats.snapshot, self._name))


class Stats(Reader):
    """Counters and sizes, read together on first use; ``refresh()`` reads them again.

    A constant number of round trips whatever the number of queues and processes.
    """

    _snapshot: Snapshot | None

    def _bound(self) -> None:
        self._snapshot = None

    def refresh(self) -> Stats:
        self._snapshot = self._read()
        return self

    def _read(self) -> Snapshot:
        return self.backend.stats(DEFAULT_QUEUE)

    @property
    def snapshot(self) -> Snapshot:
        """All the numbers, as read by the last ``refresh()`` (the first access reads them)."""
        if self._snapshot is None:
            self._snapshot = self._read()
        return self._snapshot

    processed = _SnapshotNumber[int]()
    failed = _SnapshotNumber[int]()
    #: Times a worker found that Redis had lost its data (restarted empty, flushed).
    data_losses = _SnapshotNumber[int]()
    scheduled_size = _SnapshotNumber[int]()
    retry_size = _SnapshotNumber[int]()
    dead_size = _SnapshotNumber[int]()
    #: Jobs stopped by ``stop_job``, waiting for a resume.
    stopped_size = _SnapshotNumber[int]()
    #: Processes whose heartbeat has not expired.
    processes_size = _SnapshotNumber[int]()
    #: Busy threads over all live processes, as of their last heartbeat.
    workers_size = _SnapshotNumber[int]()
    default_queue_latency = _SnapshotNumber[float]()

    @property
    def enqueued(self) -> int:
        return sum(self.snapshot.queues.values())

    @property
    def queues(self) -> dict[str, int]:
        """Queue name -> size, biggest first."""
        return dict(self.snapshot.queues)

    def reset(self, *names: str) -> None:
        """Set the lifetime counters (``"processed"``, ``"failed"``; both if none named) to 0."""
        chosen = names or ("processed", "failed")
        unknown = set(chosen) - {"processed", "failed"}
        if unknown:
            raise ValueError(f"unknown stat(s) {sorted(unknown)}; use 'processed' or 'failed'")
        self.backend.reset_stats([n for n in ("processed", "failed") if n in chosen])
        self._snapshot = None

    def tracking_backlog(self) -> Backlog | None:
        """How many tracked transitions wait for the flusher (Redis) and for how long the oldest
        has; None on a SQL broker, which writes them with the job."""
        return self.backend.tracking_backlog()

    def history(self, days: int = 30, start: date | None = None) -> History:
        """Daily processed/failed counts for ``days`` days up to ``start`` (default today, UTC)."""
        if days < 1:
            raise ValueError("days must be at least 1")
        first = start or datetime.now(UTC).date()
        dates = [first - timedelta(days=n) for n in range(days)]
        processed, failed = self.backend.history(dates)
        return History(
            processed=dict(zip(dates, processed, strict=True)),
            failed=dict(zip(dates, failed, strict=True)),
        )
