"""One run of a tracked job that another runtime (Celery, RQ, Dramatiq) runs.

The runtime's hooks call it at each moment of the run; it records what AsyncTask's own tracking
middleware records at the same moment (``tracking.rules``), and makes ``asynctask.current_job()``
work inside the job. Unlike AsyncTask's own retrier, another runtime tells its retry decision
at the moment the job raised, so the ``error`` and what follows are recorded together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import TracebackType

from asynctask import context, payload
from asynctask.context import JobContext
from asynctask.errors import JobFailed
from asynctask.tracking import rules, transitions
from asynctask.tracking.status import EventStatus
from asynctask.tracking.tracker import Tracker

logger = logging.getLogger("asynctask.tracking")


class _Throttled:
    """A warning logged at most once per ``every`` seconds: an outage would repeat it per job."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._next = 0.0

    def warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every
            logger.warning("cannot tell whether tasks were cancelled (jobs run meanwhile): %s", exc)


_unanswered = _Throttled(10.0)


class JobRun:
    def __init__(
        self,
        tracker: Tracker,
        job: payload.JobDict,
        queue: str,
        cancelled: Callable[[str], bool] | None = None,
    ) -> None:
        self.tracker = tracker
        #: Whether a task was cancelled: by default one round trip to the store per start.
        self._is_cancelled = cancelled if cancelled is not None else tracker.is_cancelled_now
        self.job = job
        self.jid = str(job["jid"])
        task = job.get("task")
        self.task = task if isinstance(task, str) else None
        self._context = JobContext(job, queue, tracker)
        self._outer: list[JobContext | None] = []

    def start(self) -> bool:
        """Record ``working``; False, with ``cancelled`` recorded instead, when the job's task
        was cancelled: the job must not run.

        Another runtime's claim brings no cancellation news: the store is asked (see
        ``cancelled``). While the store does not answer, the job runs: an outage of the
        tracking store must not stop the runtime's work, and its transitions wait in the outbox.
        """
        if self.task is not None and self._cancelled(self.task):
            self.tracker.record(rules.not_run(self.jid))
            return False
        self.tracker.record(rules.started(self.jid, self.job))
        return True

    def _cancelled(self, task: str) -> bool:
        try:
            return self._is_cancelled(task)
        except self.tracker.store.errors as exc:
            _unanswered.warn(exc)
            return False

    def __enter__(self) -> JobRun:
        self._outer.append(context.current_or_none())
        context.enter(self._context)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        context.enter(self._outer.pop())

    def finished(self) -> None:
        self.tracker.record(rules.finished(self.jid))

    def raised(self, exc: BaseException, *, retry: tuple[int, int | None] | None) -> None:
        """The job raised ``exc``: ``failed`` for ``JobFailed`` (the caller makes sure the
        runtime does not retry it), else ``error`` with what the runtime does next: ``retry``
        (attempt from 1, limit or None when the runtime decides each time) runs it again,
        None never."""
        if isinstance(exc, JobFailed):
            self.tracker.record(rules.failed(self.jid, exc))
        elif retry is not None:
            self.tracker.record(rules.errored(self.jid, exc), rules.waiting_for_retry(self.jid, *retry))
        else:
            self.tracker.record(rules.errored(self.jid, exc), rules.gave_up(self.jid, "no retries left"))

    def ended(self, status: EventStatus, message: str) -> None:
        """What else the runtime decided (revoked, timed out, lost with its worker)."""
        self.tracker.record(transitions.status(self.jid, status, message))
