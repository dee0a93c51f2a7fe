"""The job being run, for job code: ``asynctask.current_job()``.

A context variable, not a thread-local: each thread has its own, and so has each asyncio task,
so async jobs awaited side by side on one event loop each see their own.
"""

from __future__ import annotations

import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass

from asynctask.payload import JobDict
from asynctask.tracking.tracker import Tracker, is_tracked
from asynctask.tracking.transitions import LOG, PROGRESS, Transition

logger = logging.getLogger("asynctask.job")

#: The largest progress count the tracking tables hold (a signed 64-bit column).
MAX_PROGRESS = 2**63 - 1


@dataclass(slots=True)
class Iteration:
    """A resumable job's run as the runtime sees it, and job code through ``current_job().iteration``."""

    #: The checkpoint the run continues from, or the last one it stored or reached (JSON text).
    cursor: str | None
    #: Iterations run up to ``cursor``, over every run: exact at every checkpoint stored (the
    #: runtime counts whole batches, so once the job has finished its last batch is not in it).
    iterations: int
    #: How many iterations the whole job runs, if it said (``current_job().set_total``).
    total: int | None = None


@dataclass(frozen=True, slots=True)
class JobContext:
    job: JobDict
    queue: str
    #: The worker's tracking, or None when tracking is off.
    tracker: Tracker | None = None
    #: A resumable job's run (its checkpoint); None for a plain job.
    iteration: Iteration | None = None

    @property
    def jid(self) -> str:
        return str(self.job["jid"])

    @property
    def retry_count(self) -> int | None:
        """None on the first run, then 0, 1, ... on each retry (Sidekiq's count)."""
        count = self.job.get("retry_count")
        return count if isinstance(count, int) else None

    @property
    def task_id(self) -> str | None:
        task = self.job.get("task")
        return task if isinstance(task, str) else None

    @property
    def tracked(self) -> bool:
        return self.tracker is not None and is_tracked(self.job)

    def log(self, text: str) -> None:
        """Append ``text`` to this job's message log (visible to a poll within about a second).

        For a job that is not tracked the text goes to the ``asynctask.job`` logger instead.
        """
        if self.tracker is not None and self.tracked:
            self.tracker.record_live(Transition(self.jid, LOG, time.time(), str(text)))
        else:
            logger.info(str(text), extra={"fields": {"jid": self.jid, "class": self.job.get("class")}})

    def progress(self, done: int, total: int | None = None) -> None:
        """Report how far the job is: ``done`` units of ``total``."""
        if isinstance(done, bool) or not isinstance(done, int) or not 0 <= done <= MAX_PROGRESS:
            raise ValueError(f"progress 'done' must be an int from 0 to {MAX_PROGRESS}")
        if total is not None and (
            isinstance(total, bool) or not isinstance(total, int) or not 0 <= total <= MAX_PROGRESS
        ):
            raise ValueError(f"progress 'total' must be an int from 0 to {MAX_PROGRESS}, or None")
        if self.tracker is not None and self.tracked:
            self.tracker.record_live(Transition(self.jid, PROGRESS, time.time(), done=done, total=total))

    def set_total(self, total: int) -> None:
        """A resumable job's number of iterations in all: its progress is then reported from
        the iterations run (over every run), with each checkpoint."""
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise ValueError("total must be a non-negative int")
        if self.iteration is None:
            raise RuntimeError("set_total() is for resumable (generator) jobs; others call progress()")
        self.iteration.total = total

    @property
    def cancelled(self) -> bool:
        """Whether this job's task has been cancelled (a running job may stop early)."""
        task = self.task_id
        return task is not None and self.tracker is not None and self.tracker.is_cancelled_now(task)


_current: ContextVar[JobContext | None] = ContextVar("asynctask_current_job", default=None)


def current_job() -> JobContext:
    """The job running in this thread (or asyncio task); RuntimeError outside a job."""
    context = _current.get()
    if context is None:
        raise RuntimeError("current_job() is only available inside a running job")
    return context


def current_or_none() -> JobContext | None:
    """The job running in this thread (or asyncio task), or None."""
    return _current.get()


def enter(context: JobContext | None) -> None:
    _current.set(context)
