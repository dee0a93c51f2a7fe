"""Stats: the dashboard numbers (Sidekiq's ``Sidekiq::Stats``) and the daily history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from asynctask.api.fields import Field
from asynctask.api.reader import Reader
from asynctask.brokers.reads import Backlog, Snapshot

#: Queue whose latency the dashboard shows, as in Sidekiq.
DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class History:
    """Per-day counts, newest day first; days without a key count 0."""

    processed: dict[date, int]
    failed: dict[date, int]


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

    def get(self, name: str) -> object:
        """The number of the last snapshot named ``name``, as ``Snapshot`` and Sidekiq's
        ``Stats`` name it."""
        return getattr(self.snapshot, name)

    @property
    def snapshot(self) -> Snapshot:
        """All the numbers, as read by the last ``refresh()`` (the first access reads them)."""
        if self._snapshot is None:
            self._snapshot = self._read()
        return self._snapshot

    processed = Field(int)
    failed = Field(int)
    #: Times a worker found that Redis had lost its data (restarted empty, flushed).
    data_losses = Field(int)
    scheduled_size = Field(int)
    retry_size = Field(int)
    dead_size = Field(int)
    #: Jobs stopped by ``stop_job``, waiting for a resume.
    stopped_size = Field(int)
    #: Processes whose heartbeat has not expired.
    processes_size = Field(int)
    #: Busy threads over all live processes, as of their last heartbeat.
    workers_size = Field(int)
    default_queue_latency = Field(float)

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
