"""The job being run by the current worker thread, for job code: ``asynctask.current_job()``."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from asynctask.payload import JobDict


@dataclass(frozen=True, slots=True)
class JobContext:
    job: JobDict
    queue: str

    @property
    def jid(self) -> str:
        return str(self.job["jid"])

    @property
    def retry_count(self) -> int | None:
        """None on the first run, then 0, 1, ... on each retry (Sidekiq's count)."""
        count = self.job.get("retry_count")
        return count if isinstance(count, int) else None


_local = threading.local()


def current_job() -> JobContext:
    """The job running in this thread; RuntimeError outside a job."""
    context: JobContext | None = getattr(_local, "context", None)
    if context is None:
        raise RuntimeError("current_job() is only available inside a running job")
    return context


def enter(context: JobContext | None) -> None:
    _local.context = context
