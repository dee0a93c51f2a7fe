"""The ``schedule``, ``retry`` and ``dead`` sorted sets and the actions on their entries.

Every action that moves an entry removes that exact member with ZREM inside a script and
acts only if the ZREM removed it. The worker's poller moves due entries by the same rule, so
an entry clicked "retry now" while the poller takes it is enqueued once, never twice, and a
stale entry (already moved) is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

import redis

from asynctask import payload
from asynctask.api.context import Reader, as_bytes
from asynctask.api.records import JobRecord
from asynctask.api.scripts import ApiScripts
from asynctask.errors import PayloadError
from asynctask.keys import Keys
from asynctask.settings import Settings

#: Entries moved per script call by the set-wide actions.
BATCH = 100

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


class SortedEntry(JobRecord):
    """A job in a sorted set, with its score: when it runs, is retried, or died."""

    def __init__(self, parent: JobSet, raw: bytes | str, score: float) -> None:
        super().__init__(raw, parent.context)
        self.parent = parent
        self.score = score

    def __repr__(self) -> str:
        return f"<SortedEntry {self.parent.name} {self.klass or '?'} jid={self.jid} score={self.score!r}>"

    def _identity(self) -> tuple[object, ...]:
        return (type(self), self.parent.key, self.raw, self.score)

    @property
    def at(self) -> datetime:
        """The score as a UTC time."""
        return datetime.fromtimestamp(payload.timestamp(self.score) or 0.0, UTC)

    def delete(self) -> bool:
        """Remove this entry; False if it was no longer in the set."""
        return int(self.context.redis.zrem(self.parent.key, self.raw)) > 0

    def retry(self) -> bool:
        """Enqueue now with ``retry_count`` decremented (as Sidekiq's "Retry now"); False if already gone.

        The decrement makes the next failure count as the same attempt, not a new one.
        """
        return self.parent.enqueue_entries([self], decrement_retry_count=True, strict=True) == 1

    def add_to_queue(self) -> bool:
        """Enqueue now, unchanged but for a fresh ``enqueued_at``; False if already gone."""
        return self.parent.enqueue_entries([self], decrement_retry_count=False, strict=True) == 1

    def kill(self) -> bool:
        """Move to the dead set (trimmed as Sidekiq trims it); False if already gone."""
        return self.parent.kill_entries([self]) == 1


class JobSet(Reader):
    """A sorted set of jobs. Iteration is by descending score (latest first), as in Sidekiq."""

    #: The Sidekiq name of the set: ``schedule``, ``retry`` or ``dead``.
    name: ClassVar[str]
    #: Entries read per ZRANGE while iterating.
    page_size = 50

    def __init__(
        self,
        connection: redis.Redis | None = None,
        keys: Keys | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(connection, keys, settings=settings)
        self.key = self._key(self.context.keys)
        self._scripts = ApiScripts(self.context.redis)

    @staticmethod
    def _key(keys: Keys) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

    @property
    def size(self) -> int:
        return int(self.context.redis.zcard(self.key))

    def __iter__(self) -> Iterator[SortedEntry]:
        """Entries by descending score, ``page_size`` per round trip.

        Each page starts after the last entry of the previous page still in the set, looked up
        when the page is read (``scripts.PAGE``): entries deleted, moved or added meanwhile,
        by this caller or by the poller, shift nothing.
        """
        lowest = "+inf"
        previous: list[bytes] = []
        while True:
            flat = self._scripts.page(keys=[self.key], args=[self.page_size, lowest, *reversed(previous)])
            rows = [(as_bytes(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]
            if not rows:
                return
            for raw, score in rows:
                yield SortedEntry(self, raw, score)
            lowest = repr(rows[-1][1])
            previous = [raw for raw, _ in rows]

    def scan(self, text: str) -> Iterator[SortedEntry]:
        """Entries whose stored JSON contains ``text`` (ZSCAN MATCH, as Sidekiq's ``scan``)."""
        pattern = "*" + _GLOB_SPECIAL.sub(r"\\\1", text) + "*"
        for raw, score in self.context.redis.zscan_iter(self.key, match=pattern, count=100):
            yield SortedEntry(self, as_bytes(raw), float(score))

    def find_job(self, jid: str) -> SortedEntry | None:
        for entry in self.scan(jid):
            if entry.jid == jid:
                return entry
        return None

    def fetch(self, score: float | tuple[float, float], jid: str | None = None) -> list[SortedEntry]:
        """Entries with this score, or a score in the inclusive ``(low, high)`` range; of ``jid`` if given."""
        low, high = score if isinstance(score, tuple) else (score, score)
        rows = self.context.redis.zrange(
            self.key, repr(float(low)), repr(float(high)), byscore=True, withscores=True
        )
        entries = [SortedEntry(self, raw, s) for raw, s in _scored(rows)]
        return [e for e in entries if e.jid == jid] if jid is not None else entries

    def clear(self) -> int:
        """Delete the whole set; return how many entries it held."""
        pipe = self.context.redis.pipeline(transaction=True)
        pipe.zcard(self.key)
        pipe.unlink(self.key)
        return int(pipe.execute()[0])

    def enqueue_entries(
        self, entries: Iterable[SortedEntry], *, decrement_retry_count: bool, strict: bool = False
    ) -> int:
        """Move entries of this set to their queues with a fresh ``enqueued_at``; return how many moved.

        Entries that are not valid jobs cannot be routed to a queue: with ``strict`` they raise
        PayloadError, otherwise they are left where they are.
        """
        now = payload.now()
        queue_keys: list[str] = []
        pairs: list[bytes | str] = []
        queue_names: list[str] = []
        for entry in entries:
            if entry.item is None or not entry.valid:
                if strict:
                    raise PayloadError(f"cannot enqueue an invalid entry: {entry.error}", entry.item)
                continue
            job: payload.JobDict = dict(entry.item)
            count = job.get("retry_count")
            if decrement_retry_count and isinstance(count, int) and not isinstance(count, bool):
                job["retry_count"] = count - 1
            job["enqueued_at"] = now
            queue = job.get("queue")
            queue = queue if isinstance(queue, str) and queue else "default"
            queue_keys.append(self.context.keys.queue(queue))
            pairs += (entry.raw, payload.dumps(job))
            queue_names.append(queue)
        if not queue_keys:
            return 0
        keys = [self.key, self.context.keys.queues, *queue_keys]
        return int(self._scripts.enqueue(keys=keys, args=[*pairs, *queue_names]))

    def kill_entries(self, entries: Iterable[SortedEntry]) -> int:
        """Move entries of this set to the dead set, as they are, then trim it; return how many moved."""
        raws = [entry.raw for entry in entries]
        if not raws:
            return 0
        now = payload.now()
        s = self.context.settings
        return int(
            self._scripts.kill(
                keys=[self.key, self.context.keys.dead],
                args=[repr(now), repr(now - s.dead_timeout), -(s.dead_max_jobs + 1), *raws],
            )
        )

    def _retry_all(self) -> int:
        moved = 0
        # Invalid entries stay put and keep the lowest ranks; read past them.
        skipped = 0
        while True:
            entries = self._page(skipped)
            if not entries:
                return moved
            valid = [e for e in entries if e.valid]
            skipped += len(entries) - len(valid)
            moved += self.enqueue_entries(valid, decrement_retry_count=True)

    def _kill_all(self) -> int:
        moved = 0
        while entries := self._page(0):
            moved += self.kill_entries(entries)
        return moved

    def _page(self, start: int) -> list[SortedEntry]:
        rows = self.context.redis.zrange(self.key, start, start + BATCH - 1, withscores=True)
        return [SortedEntry(self, raw, score) for raw, score in _scored(rows)]


class ScheduledSet(JobSet):
    """``schedule``: jobs pushed with ``at``, scored by when they are due."""

    name = "schedule"

    @staticmethod
    def _key(keys: Keys) -> str:
        return keys.schedule


class RetrySet(JobSet):
    """``retry``: failed jobs, scored by when they are retried."""

    name = "retry"

    @staticmethod
    def _key(keys: Keys) -> str:
        return keys.retry

    def retry_all(self) -> int:
        """Enqueue every entry now (invalid ones stay); return how many were enqueued."""
        return self._retry_all()

    def kill_all(self) -> int:
        """Move every entry to the dead set; return how many were moved."""
        return self._kill_all()


class DeadSet(JobSet):
    """``dead``: jobs out of retries, scored by when they died; trimmed by count and age."""

    name = "dead"

    @staticmethod
    def _key(keys: Keys) -> str:
        return keys.dead

    def retry_all(self) -> int:
        """Enqueue every entry now (invalid ones stay); return how many were enqueued."""
        return self._retry_all()

    def kill(self, job: Mapping[str, Any] | bytes | str) -> None:
        """Add a job (a dict, or its JSON) to the dead set, trimming it as Sidekiq does."""
        encoded = job if isinstance(job, bytes | str) else payload.dumps(job)
        now = payload.now()
        s = self.context.settings
        pipe = self.context.redis.pipeline(transaction=True)
        pipe.zadd(self.key, {as_bytes(encoded): now})
        pipe.zremrangebyscore(self.key, "-inf", now - s.dead_timeout)
        pipe.zremrangebyrank(self.key, 0, -(s.dead_max_jobs + 1))
        pipe.execute()


def _scored(rows: Any) -> list[tuple[bytes, float]]:
    """ZRANGE ... WITHSCORES replies, whatever redis-py's union type says they are."""
    return [(as_bytes(raw), float(score)) for raw, score in rows]
