"""Queue: the jobs waiting in one queue (Sidekiq's ``Sidekiq::Queue``)."""

from __future__ import annotations

from collections.abc import Iterator

import redis

from asynctask import payload
from asynctask.api.reader import Context
from asynctask.api.records import JobRecord
from asynctask.keys import Keys
from asynctask.settings import Settings


class Queue:
    """A queue. Jobs a worker has taken (in flight) are no longer in it.

    On Redis a queue is a list: producers LPUSH to the head, workers take from the tail, the
    tail is the oldest job. In SQL the next job is the lowest (priority, id) of the queue.
    """

    #: Jobs read per round trip while iterating.
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
        #: Where the queue lives in the store (its list's key on Redis).
        self.key = self.context.backend.queue_key(name)

    @classmethod
    def all(
        cls,
        connection: redis.Redis | None = None,
        keys: Keys | None = None,
        *,
        settings: Settings | None = None,
    ) -> list[Queue]:
        """Every known queue, sorted by name.

        Redis knows the names in its ``queues`` set (a queue stays there, even empty, until
        cleared); SQL knows the queues that hold jobs, waiting or in flight. Both list the
        paused queues, empty or not.
        """
        return cls.all_over(Context.resolve(connection, keys, settings))

    @classmethod
    def over(cls, context: Context, name: str = "default") -> Queue:
        """Queue ``name`` of an already resolved ``context``."""
        return cls._of(name, context)

    @classmethod
    def all_over(cls, context: Context) -> list[Queue]:
        """``all`` of an already resolved ``context``."""
        return [cls._of(name, context) for name in context.backend.queue_names()]

    @classmethod
    def _of(cls, name: str, context: Context) -> Queue:
        queue = cls.__new__(cls)
        queue.name = name
        queue.context = context
        queue.key = context.backend.queue_key(name)
        return queue

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Queue) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    @property
    def size(self) -> int:
        return self.context.backend.queue_size(self.name)

    @property
    def latency(self) -> float:
        """Seconds the oldest job has waited since it was enqueued; 0 when empty."""
        return self.context.backend.queue_latency(self.name)

    def __iter__(self) -> Iterator[JobRecord]:
        """Jobs in the reverse of the order they will run (on Redis: newest first), one round
        trip per ``page_size``."""
        for row in self.context.backend.queue_rows(self.name, self.page_size):
            yield JobRecord(row.raw, self.context, self.name, row.ref)

    def find_job(self, jid: str) -> JobRecord | None:
        """The job with this jid (on Redis, by a scan of the whole list: O(n), as in Sidekiq)."""
        for row in self.context.backend.queue_candidates(self.name, jid):
            record = JobRecord(row.raw, self.context, self.name, row.ref)
            if record.jid == jid:
                return record
        return None

    def clear(self) -> int:
        """Delete every waiting job (on Redis, the list and the queue's name); return how many.
        A paused queue stays paused."""
        return self.context.backend.queue_clear(self.name)

    @property
    def paused(self) -> bool:
        """Whether workers leave the queue's jobs alone until it is resumed."""
        return self.context.backend.queue_paused(self.name)

    def pause(self) -> None:
        """Stop every worker process taking jobs from this queue, from its next claim on; the
        jobs running go on, and pushes still land in the queue. A queue with no jobs, or one
        no worker serves yet, can be paused too. Raises ValueError for a name no job can
        carry (``payload.valid_queue``)."""
        self.context.backend.queue_pause(self._checked_name(), True)

    def resume(self) -> None:
        """Let workers take the queue's jobs again (idle ones see it within about a second)."""
        self.context.backend.queue_pause(self._checked_name(), False)

    def _checked_name(self) -> str:
        if payload.valid_queue(self.name) is None:
            raise ValueError(f"not a queue name: {self.name!r} ({payload.QUEUE_NAME_RULE})")
        return self.name
