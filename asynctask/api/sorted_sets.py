"""The ``schedule``, ``retry`` and ``dead`` sets and the actions on their entries.

Every action that moves or removes an entry acts only if that entry is still in the set with
the score it was read with (see ``brokers.reads``). The worker's poller moves due entries by the
same rule, so an entry clicked "retry now" while the poller takes it is enqueued once, never
twice, and a stale entry (already moved) is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from asynctask import payload
from asynctask.api.reader import Reader
from asynctask.api.records import JobRecord
from asynctask.brokers.reads import Move, Scored, SetName
from asynctask.errors import PayloadError

#: Entries moved per round trip by the set-wide actions.
BATCH = 100


class SortedEntry(JobRecord):
    """A job in a sorted set, with its score: when it runs, is retried, or died."""

    def __init__(self, parent: JobSet, raw: bytes | str, score: float, ref: int | None = None) -> None:
        super().__init__(raw, parent.context, ref=ref)
        self.parent = parent
        self.score = score

    @classmethod
    def _of(cls, parent: JobSet, row: Scored) -> SortedEntry:
        return cls(parent, row.raw, row.score, row.ref)

    @property
    def scored(self) -> Scored:
        """The entry as the backend names it."""
        return Scored(self.raw, self.score, self.ref)

    def __repr__(self) -> str:
        return f"<SortedEntry {self.parent.name} {self.klass or '?'} jid={self.jid} score={self.score!r}>"

    def _identity(self) -> tuple[object, ...]:
        return (type(self), self.parent.key, self.raw, self.score, self.ref)

    @property
    def at(self) -> datetime:
        """The score as a UTC time."""
        return datetime.fromtimestamp(payload.timestamp(self.score) or 0.0, UTC)

    def delete(self) -> bool:
        """Remove this entry; False if it was no longer in the set."""
        return self.context.backend.set_delete(self.parent.name, self.scored)

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
    name: ClassVar[SetName]
    #: Entries read per round trip while iterating.
    page_size = 50

    def _bound(self) -> None:
        #: Where the set lives in the store (its key on Redis).
        self.key = self.backend.set_key(self.name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}>"

    @property
    def size(self) -> int:
        return self.backend.set_size(self.name)

    def __iter__(self) -> Iterator[SortedEntry]:
        """Entries by descending score, ``page_size`` per round trip.

        Each page starts after the last entry of the previous page still in the set: entries
        deleted, moved or added meanwhile, by this caller or by the poller, shift nothing.
        """
        for row in self.backend.set_rows(self.name, self.page_size):
            yield SortedEntry._of(self, row)

    def scan(self, text: str) -> Iterator[SortedEntry]:
        """Entries whose stored JSON contains ``text`` (as Sidekiq's ``scan``)."""
        for row in self.backend.set_scan(self.name, text):
            yield SortedEntry._of(self, row)

    def find_job(self, jid: str) -> SortedEntry | None:
        for row in self.backend.set_candidates(self.name, jid):
            entry = SortedEntry._of(self, row)
            if entry.jid == jid:
                return entry
        return None

    def fetch(self, score: float | tuple[float, float], jid: str | None = None) -> list[SortedEntry]:
        """Entries with this score, or a score in the inclusive ``(low, high)`` range; of ``jid`` if given."""
        low, high = score if isinstance(score, tuple) else (score, score)
        entries = [SortedEntry._of(self, row) for row in self.backend.set_range(self.name, low, high)]
        return [e for e in entries if e.jid == jid] if jid is not None else entries

    def clear(self) -> int:
        """Delete the whole set; return how many entries it held."""
        return self.backend.set_clear(self.name)

    def enqueue_entries(
        self, entries: Iterable[SortedEntry], *, decrement_retry_count: bool, strict: bool = False
    ) -> int:
        """Move entries of this set to their queues with a fresh ``enqueued_at``; return how many moved.

        Entries that are not valid jobs cannot be routed to a queue: with ``strict`` they raise
        PayloadError, otherwise they are left where they are.
        """
        now = payload.now()
        moves: list[Move] = []
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
            moves.append(Move(entry.scored, payload.dumps(job), queue))
        return self.backend.set_enqueue(self.name, moves, now) if moves else 0

    def kill_entries(self, entries: Iterable[SortedEntry]) -> int:
        """Move entries of this set to the dead set, as they are, then trim it; return how many moved."""
        rows = [entry.scored for entry in entries]
        return self.backend.set_kill(self.name, rows, payload.now()) if rows else 0

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
        return [SortedEntry._of(self, row) for row in self.backend.set_page(self.name, start, BATCH)]


class ScheduledSet(JobSet):
    """``schedule``: jobs pushed with ``at``, scored by when they are due."""

    name = "schedule"


class RetrySet(JobSet):
    """``retry``: failed jobs, scored by when they are retried."""

    name = "retry"

    def retry_all(self) -> int:
        """Enqueue every entry now (invalid ones stay); return how many were enqueued."""
        return self._retry_all()

    def kill_all(self) -> int:
        """Move every entry to the dead set; return how many were moved."""
        return self._kill_all()


class DeadSet(JobSet):
    """``dead``: jobs out of retries, scored by when they died; trimmed by count and age."""

    name = "dead"

    def retry_all(self) -> int:
        """Enqueue every entry now (invalid ones stay); return how many were enqueued."""
        return self._retry_all()

    def kill(self, job: Mapping[str, Any] | bytes | str) -> None:
        """Add a job (a dict, or its JSON) to the dead set, trimming it as Sidekiq does."""
        encoded = job if isinstance(job, bytes | str) else payload.dumps(job)
        self.backend.dead_add(encoded, payload.now())


class StoppedSet(JobSet):
    """``stopped``: jobs stopped by ``stop_job``, scored by when they stopped; never trimmed."""

    name = "stopped"
