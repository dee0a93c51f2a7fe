"""WorkSet: the jobs running right now, from each process's busy-thread hash."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from asynctask import payload
from asynctask.api.context import Reader, as_bytes, as_text
from asynctask.api.records import JobRecord


@dataclass(frozen=True, slots=True)
class Work:
    """One busy thread: which process, which thread, and the job it runs."""

    identity: str
    thread_id: str
    queue: str
    #: When the job started, epoch seconds.
    run_at: float | None
    job: JobRecord

    @property
    def jid(self) -> str | None:
        return self.job.jid


class WorkSet(Reader):
    """Busy threads of every live process, oldest job first.

    Read from ``<identity>:work`` (Sidekiq >= 6.4.2), or from ``<identity>:workers`` for a
    process that writes only that (Sidekiq <= 6.4.1). AsyncTask writes both. Both are as of
    the process's last heartbeat.
    """

    def __iter__(self) -> Iterator[Work]:
        return iter(self.works())

    def works(self) -> list[Work]:
        """Three round trips at most: members, each ``:work``, then ``:workers`` where ``:work`` is empty."""
        redis_, k = self.context.redis, self.context.keys
        identities = sorted(as_text(m) for m in redis_.smembers(k.processes))
        if not identities:
            return []
        pipe = redis_.pipeline(transaction=False)
        for identity in identities:
            pipe.exists(k.process(identity))
            pipe.hgetall(k.work(identity))
        replies = pipe.execute()
        hashes: dict[str, dict[Any, Any]] = {}
        for index, identity in enumerate(identities):
            # A member whose process hash expired is a dead process; its threads are not busy.
            if replies[2 * index]:
                hashes[identity] = replies[2 * index + 1]
        old_style = [identity for identity, threads in hashes.items() if not threads]
        if old_style:
            pipe = redis_.pipeline(transaction=False)
            for identity in old_style:
                pipe.hgetall(k.workers(identity))
            hashes.update(zip(old_style, pipe.execute(), strict=True))
        works = [
            self._work(identity, as_text(tid), value)
            for identity, threads in hashes.items()
            for tid, value in threads.items()
        ]
        return sorted(works, key=lambda w: (w.run_at or 0.0, w.identity, w.thread_id))

    def _work(self, identity: str, thread_id: str, value: bytes | str) -> Work:
        try:
            entry = json.loads(value)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            return Work(identity, thread_id, "", None, JobRecord(value, self.context, ""))
        queue = entry.get("queue")
        queue = queue if isinstance(queue, str) else ""
        job = entry.get("payload")
        # Sidekiq < 6.0 stored the payload as an object rather than a JSON string.
        raw = payload.dumps(job) if isinstance(job, dict) else job if isinstance(job, str) else b""
        return Work(
            identity,
            thread_id,
            queue,
            payload.timestamp(entry.get("run_at")),
            JobRecord(as_bytes(raw), self.context, queue),
        )

    def find(self, jid: str) -> Work | None:
        """The busy thread running the job with this jid, or None."""
        return next((w for w in self.works() if w.jid == jid), None)

    @property
    def size(self) -> int:
        """Busy threads as the processes last reported them (their ``busy`` field), as in Sidekiq."""
        redis_, k = self.context.redis, self.context.keys
        identities = [as_text(m) for m in redis_.smembers(k.processes)]
        if not identities:
            return 0
        pipe = redis_.pipeline(transaction=False)
        for identity in identities:
            pipe.hget(k.process(identity), "busy")
        return sum(int(busy) for busy in pipe.execute() if busy is not None)
