"""WorkSet: the jobs running right now, as each live process last reported them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from asynctask import payload
from asynctask.api.reader import Reader
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
    """Busy threads of every live process, oldest job first, as of each process's last heartbeat.

    On Redis, read from ``<identity>:work`` (Sidekiq >= 6.4.2), or from ``<identity>:workers``
    for a process that writes only that (Sidekiq <= 6.4.1); AsyncTask writes both.
    """

    def __iter__(self) -> Iterator[Work]:
        return iter(self.works())

    def works(self) -> list[Work]:
        works = [self._work(e.identity, e.thread_id, e.value) for e in self.backend.work()]
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
            JobRecord(raw, self.context, queue),
        )

    def find(self, jid: str) -> Work | None:
        """The busy thread running the job with this jid, or None."""
        return next((w for w in self.works() if w.jid == jid), None)

    @property
    def size(self) -> int:
        """Busy threads as the processes last reported them (their ``busy`` count), as in Sidekiq."""
        return self.backend.busy()
