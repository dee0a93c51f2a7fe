"""Stats: the dashboard numbers (Sidekiq's ``Sidekiq::Stats``) and the daily history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import redis

from asynctask.api.context import Reader, as_text
from asynctask.api.queues import oldest_latency
from asynctask.keys import Keys
from asynctask.settings import Settings

#: Queue whose latency the dashboard shows, as in Sidekiq.
DEFAULT_QUEUE = "default"


@dataclass(frozen=True, slots=True)
class Snapshot:
    processed: int
    failed: int
    scheduled_size: int
    retry_size: int
    dead_size: int
    processes_size: int
    workers_size: int
    default_queue_latency: float
    queues: dict[str, int]


@dataclass(frozen=True, slots=True)
class History:
    """Per-day counts, newest day first; days without a key count 0."""

    processed: dict[date, int]
    failed: dict[date, int]


class Stats(Reader):
    """Counters and sizes, read together on first use; ``refresh()`` reads them again.

    Two pipelined round trips whatever the number of queues and processes: first the
    counters, set sizes and the members of ``queues`` and ``processes``, then every queue's
    length and every process's ``busy``.
    """

    def __init__(
        self,
        connection: redis.Redis | None = None,
        keys: Keys | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(connection, keys, settings=settings)
        self._snapshot: Snapshot | None = None

    def refresh(self) -> Stats:
        self._snapshot = self._read()
        return self

    def _read(self) -> Snapshot:
        k = self.context.keys
        pipe = self.context.redis.pipeline(transaction=False)
        pipe.get(k.stat_processed)
        pipe.get(k.stat_failed)
        pipe.zcard(k.schedule)
        pipe.zcard(k.retry)
        pipe.zcard(k.dead)
        pipe.smembers(k.processes)
        pipe.smembers(k.queues)
        pipe.lindex(k.queue(DEFAULT_QUEUE), -1)
        processed, failed, scheduled, retries, dead, members, queue_members, oldest = pipe.execute()
        identities = sorted(as_text(m) for m in members)
        names = sorted(as_text(m) for m in queue_members)
        replies: list[Any] = []
        if names or identities:
            pipe = self.context.redis.pipeline(transaction=False)
            for name in names:
                pipe.llen(k.queue(name))
            for identity in identities:
                # The process hash expires 60 s after its last beat: no hash, no process.
                pipe.hget(k.process(identity), "busy")
            replies = pipe.execute()
        sizes = [int(size) for size in replies[: len(names)]]
        busy = [_int(b) for b in replies[len(names) :] if b is not None]
        return Snapshot(
            processed=_int(processed),
            failed=_int(failed),
            scheduled_size=int(scheduled),
            retry_size=int(retries),
            dead_size=int(dead),
            processes_size=len(busy),
            workers_size=sum(busy),
            default_queue_latency=oldest_latency(oldest, self.context),
            queues=dict(sorted(zip(names, sizes, strict=True), key=lambda item: (-item[1], item[0]))),
        )

    @property
    def snapshot(self) -> Snapshot:
        """All the numbers, as read by the last ``refresh()`` (the first access reads them)."""
        if self._snapshot is None:
            self._snapshot = self._read()
        return self._snapshot

    @property
    def processed(self) -> int:
        return self.snapshot.processed

    @property
    def failed(self) -> int:
        return self.snapshot.failed

    @property
    def scheduled_size(self) -> int:
        return self.snapshot.scheduled_size

    @property
    def retry_size(self) -> int:
        return self.snapshot.retry_size

    @property
    def dead_size(self) -> int:
        return self.snapshot.dead_size

    @property
    def processes_size(self) -> int:
        """Processes whose heartbeat hash is alive (stale members of ``processes`` are not counted)."""
        return self.snapshot.processes_size

    @property
    def workers_size(self) -> int:
        """Busy threads over all live processes, as of their last heartbeat."""
        return self.snapshot.workers_size

    @property
    def enqueued(self) -> int:
        return sum(self.snapshot.queues.values())

    @property
    def default_queue_latency(self) -> float:
        return self.snapshot.default_queue_latency

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
        k = self.context.keys
        self.context.redis.mset({k.stat_processed if n == "processed" else k.stat_failed: 0 for n in chosen})
        self._snapshot = None

    def history(self, days: int = 30, start: date | None = None) -> History:
        """Daily processed/failed counts for ``days`` days up to ``start`` (default today, UTC)."""
        if days < 1:
            raise ValueError("days must be at least 1")
        first = start or datetime.now(UTC).date()
        dates = [first - timedelta(days=n) for n in range(days)]
        moments = [datetime(d.year, d.month, d.day, tzinfo=UTC) for d in dates]
        k = self.context.keys
        pipe = self.context.redis.pipeline(transaction=False)
        pipe.mget([k.stat_processed_day(m) for m in moments])
        pipe.mget([k.stat_failed_day(m) for m in moments])
        processed, failed = pipe.execute()
        return History(
            processed={d: _int(v) for d, v in zip(dates, processed, strict=True)},
            failed={d: _int(v) for d, v in zip(dates, failed, strict=True)},
        )


def _int(value: Any) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0
