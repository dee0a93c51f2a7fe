"""Queue: one ``queue:<name>`` list (Sidekiq's ``Sidekiq::Queue``)."""

from __future__ import annotations

from collections.abc import Iterator

import redis

from asynctask.api.context import Context, as_bytes, as_text
from asynctask.api.records import JobRecord
from asynctask.keys import Keys
from asynctask.settings import Settings


class Queue:
    """A queue. Producers LPUSH to the head, workers take from the tail: the tail is the oldest job."""

    #: Jobs read per LRANGE while iterating.
    page_size = 50

    def __init__(
        self,
        name: str = "default",
        connection: redis.Redis | None = None,
        keys: Keys | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        self.name = name
        self.context = Context.resolve(connection, keys, settings)
        self.key = self.context.keys.queue(name)

    @classmethod
    def all(
        cls,
        connection: redis.Redis | None = None,
        keys: Keys | None = None,
        *,
        settings: Settings | None = None,
    ) -> list[Queue]:
        """Every queue named in the ``queues`` set, sorted by name."""
        ctx = Context.resolve(connection, keys, settings)
        names = sorted(as_text(m) for m in ctx.redis.smembers(ctx.keys.queues))
        return [cls(name, ctx.redis, ctx.keys, settings=ctx.settings) for name in names]

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Queue) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def size(self) -> int:
        return int(self.context.redis.llen(self.key))

    @property
    def latency(self) -> float:
        """Seconds the oldest job has waited (now - its ``enqueued_at``); 0 when empty."""
        return oldest_latency(self.context.redis.lindex(self.key, -1), self.context)

    def __iter__(self) -> Iterator[JobRecord]:
        """Jobs newest first, one LRANGE per ``page_size``."""
        for raw in self._rows():
            yield JobRecord(raw, self.context, self.name)

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with this jid, found by a scan of the whole list (O(n), as in Sidekiq)."""
        needle = jid.encode()
        for raw in self._rows():
            # Checking the bytes first avoids decoding every job of a long queue.
            if needle in raw:
                record = JobRecord(raw, self.context, self.name)
                if record.jid == jid:
                    return record
        return None

    def _rows(self) -> Iterator[bytes]:
        # The list changes under the cursor while jobs are deleted, pushed or fetched. As in
        # Sidekiq, each page's start is corrected by how much the list shrank or grew; on top
        # of that a job yielded by the previous page is skipped, so that fetches from the tail
        # while iterating (which shift nothing at the head) do not yield a job twice.
        redis_ = self.context.redis
        size = self.page_size
        initial = self.size
        page = 0
        shift = 0
        previous: set[bytes] = set()
        while True:
            start = max(0, page * size - shift)
            rows = [as_bytes(row) for row in redis_.lrange(self.key, start, start + size - 1)]
            if not rows:
                return
            page += 1
            yield from (raw for raw in rows if raw not in previous)
            previous = set(rows)
            shift = initial - self.size

    def clear(self) -> int:
        """Delete the queue and forget its name; return how many jobs it held."""
        pipe = self.context.redis.pipeline(transaction=True)
        pipe.llen(self.key)
        pipe.unlink(self.key)
        pipe.srem(self.context.keys.queues, self.name)
        return int(pipe.execute()[0])


def oldest_latency(raw: bytes | str | None, context: Context) -> float:
    """Seconds the job ``raw`` (a queue's tail) has waited since ``enqueued_at``; 0 without one."""
    if raw is None:
        return 0.0
    record = JobRecord(raw, context)
    return record.latency if record.enqueued_at is not None else 0.0
