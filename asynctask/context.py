"""The job being run, for job code: ``asynctask.current_job()``.

A context variable, not a thread-local: each thread has its own, and so has each asyncio task,
so async jobs awaited side by side on one event loop each see their own.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

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


class TaskAdder(Protocol):
    """What adds jobs to a running job's task (``tasks.additions``), given by its worker."""

    def __call__(
        self, task_id: str, call: str, items: Iterable[Any], job: object | None, chunk_size: int | None
    ) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class JobContext:
    job: JobDict
    queue: str
    #: The worker's tracking, or None when tracking is off.
    tracker: Tracker | None = None
    #: A resumable job's run (its checkpoint); None for a plain job.
    iteration: Iteration | None = None
    #: What adds work to the job's task; None in a runtime that cannot (another runtime's).
    adder: TaskAdder | None = None
    #: The ``add`` calls made in this run since each checkpoint, made at the first: the
    #: worker builds a context per job, and few jobs add.
    _calls: dict[str | None, int] | None = field(default=None, repr=False)

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
    def task(self) -> OwnTask:
        """The job's task, to add work to; RuntimeError for a job outside any task."""
        task_id = self.task_id
        if task_id is None:
            raise RuntimeError("this job is not part of a task")
        return OwnTask(task_id, self)

    def next_call(self) -> str:
        """The key of the job's next ``add`` call (``tasks.additions``): the job's id, the
        checkpoint it had reached (a resumable job's), and the call's place among those made
        since in this run, so that a run that repeats the same steps repeats the same keys."""
        calls = self._calls
        if calls is None:
            calls = {}
            # Frozen, to be shared safely; the counter alone changes, only in the job's own thread.
            object.__setattr__(self, "_calls", calls)
        cursor = self.iteration.cursor if self.iteration is not None else None
        place = calls.get(cursor, 0)
        calls[cursor] = place + 1
        if cursor is None:
            return f"{self.jid}/{place}"
        return f"{self.jid}/{hashlib.sha256(cursor.encode()).hexdigest()[:16]}/{place}"

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


@dataclass(frozen=True, slots=True)
class OwnTask:
    """The task of the running job (``current_job().task``)."""

    id: str
    context: JobContext

    def add(self, items: Iterable[Any], *, job: object = None, chunk_size: int | None = None) -> list[str]:
        """Add ``items`` to this task, in jobs of ``chunk_size`` items (the task's by default)
        of ``job`` (a job, its name; the task's own by default); return the new jobs' ids.

        The task grows by them and ends only once they have ended too: one job may count the
        work, then add it. All or nothing, as ``create_task``; once it returned the jobs are
        queued (or will be by the next look of a flusher, if Redis failed just then). A job run
        again that makes the same calls in the same order since the same checkpoint gets the
        jobs its first run added, and adds nothing twice. A fed task's jobs join its feed.
        Refused for a task that was cancelled or has ended, one of another runtime, and a
        ``job`` with a concurrency key, rate limit or unique key."""
        return self._adder()(self.id, self.context.next_call(), items, job, chunk_size)

    async def aadd(
        self, items: Iterable[Any], *, job: object = None, chunk_size: int | None = None
    ) -> list[str]:
        """``add``, for an ``async def`` job: its SQL and broker round trips are made in a
        thread, while the event loop runs the other jobs."""
        # Loaded here: a worker that runs no async job never loads asyncio.
        import asyncio

        adder, call = self._adder(), self.context.next_call()
        return await asyncio.to_thread(adder, self.id, call, items, job, chunk_size)

    def _adder(self) -> TaskAdder:
        adder = self.context.adder
        if adder is None:
            raise RuntimeError("jobs are added to a task by a job that AsyncTask's worker runs, tracked")
        return adder


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
