"""Tracking middleware: the server half records a tracked job's run, the client half its push.

Server (``TrackingServerMiddleware``), for a tracked job (``track=True``, or part of a task):
- its task was cancelled before it started -> ``cancelled``; the job is skipped;
- it starts -> ``working``; it returns -> ``finish``;
- it raises ``asynctask.JobFailed`` -> ``failed`` with the message (the runtime does not
  retry it);
- it raises anything else -> ``error`` with the message; when the runtime then schedules a
  retry, the retrier records ``enqueue`` "waiting for retry n of m" (the runtime decides, so
  a ``retry_in`` hook that kills the job is reported truthfully). The ``error`` is held back
  until then and written together with that decision, so no poll sees the job ended (and
  its task finished) in between;
- a shutdown interrupts it (an async job: cancels it) -> ``error`` "interrupted", then
  ``enqueue``: it runs again;
- an async job cancelled because its task was cancelled -> ``cancelled``;
- a resumable job handed back between iterations (``JobInterrupted``) -> ``stopped`` "stopped
  at <cursor>", ``cancelled``, or (its task paused, the worker stopping) ``enqueue``: it
  continues from there.

Client (``TrackingClientMiddleware``): a job pushed with ``track=True`` outside a task is
recorded as ``enqueue`` in the same Redis round trip as the push; a job with a concurrency
key with the message "waiting for <key>", written once, with the push: the broker may keep
it in the key's line for a while, and nothing polls that. (Events of a task's jobs are
written by ``create_task`` itself, in bulk, with the same message.)

Both are in the default chains (``asynctask.client_chain`` / ``server_chain``); add them
to a chain of your own to track jobs pushed or run through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from asynctask import payload, storable
from asynctask.context import current_job
from asynctask.errors import TASK_CANCELLED, JobFailed, JobInterrupted, Shutdown
from asynctask.tracking import outbox, rules, transitions
from asynctask.tracking.status import EventStatus
from asynctask.tracking.tracker import Tracker, is_tracked


def _interrupted(jid: str, exc: JobInterrupted) -> transitions.Transition:
    """What a resumable job handed back between iterations becomes."""
    at = "before its first checkpoint" if exc.cursor is None else f"at {exc.cursor}"
    if exc.reason == "stop":
        return transitions.status(jid, EventStatus.STOPPED, f"stopped {at}")
    if exc.reason == "cancel":
        return transitions.status(jid, EventStatus.CANCELLED, f"task cancelled; stopped {at}")
    if exc.reason == "pause":
        return transitions.status(
            jid, EventStatus.ENQUEUE, f"task paused; stopped {at}, it continues when the task resumes"
        )
    return transitions.status(
        jid, EventStatus.ENQUEUE, f"pushed back to its queue by a shutdown, {at}; it continues from there"
    )


class TrackingClientMiddleware:
    def __call__(
        self, job: payload.JobDict, queue: str, call_next: Callable[[], payload.JobDict | None]
    ) -> payload.JobDict | None:
        if job.get("track") is True:
            # Its params are stored with its event: refused here, before anything is pushed.
            storable.check(job.get("args"), "args")
        pushed = call_next()
        if pushed is not None and pushed.get("track") is True and "task" not in pushed:
            args = pushed.get("args")
            key = pushed.get("concurrency_key")
            outbox.record_on_push(
                transitions.status(
                    pushed["jid"],
                    EventStatus.ENQUEUE,
                    f"waiting for {key}" if isinstance(key, str) else None,
                    name=str(pushed.get("class")),
                    params=args if isinstance(args, list) else None,
                )
            )
        return pushed


class TrackingServerMiddleware:
    def __call__(
        self, definition: Any, job: payload.JobDict, queue: str, call_next: Callable[[], Any]
    ) -> Any:
        context = current_job()
        tracker = context.tracker
        if tracker is None or not is_tracked(job):
            return call_next()
        jid = job["jid"]
        if not _started(tracker, jid, context.task_id, job):
            return None
        try:
            result = call_next()
        except BaseException as exc:
            _ended(tracker, jid, exc, interrupted=isinstance(exc, Shutdown))
            raise
        tracker.record(rules.finished(jid))
        return result

    def acall(
        self, definition: Any, job: payload.JobDict, queue: str, call_next: Callable[[], Awaitable[Any]]
    ) -> Awaitable[Any]:
        """The same, around an async job: an untracked one is awaited as it is, with no
        coroutine of this middleware around it (each is passed through at every await)."""
        context = current_job()
        tracker = context.tracker
        if tracker is None or not is_tracked(job):
            return call_next()
        return _around_tracked(tracker, context.task_id, job, call_next)


async def _around_tracked(
    tracker: Tracker, task_id: str | None, job: payload.JobDict, call_next: Callable[[], Awaitable[Any]]
) -> Any:
    """Around a tracked async job. A cancellation from outside the job is the runtime's: its
    task was cancelled (``TASK_CANCELLED``: ``cancelled``), or the worker is stopping (the
    async job's shutdown)."""
    jid = job["jid"]
    if not _started(tracker, jid, task_id, job):
        return None
    try:
        result = await call_next()
    except asyncio.CancelledError as exc:
        if not _cancelled_from_outside():
            _ended(tracker, jid, exc, interrupted=False)
        elif exc.args == (TASK_CANCELLED,):
            tracker.record(
                transitions.status(jid, EventStatus.CANCELLED, "task cancelled; cancelled while running")
            )
        else:
            _ended(tracker, jid, exc, interrupted=True)
        raise
    except BaseException as exc:
        _ended(tracker, jid, exc, interrupted=False)
        raise
    tracker.record(rules.finished(jid))
    return result


def _started(tracker: Tracker, jid: str, task: str | None, job: payload.JobDict) -> bool:
    """Record the start of a run; False, with ``cancelled`` recorded, if its task was cancelled."""
    if task is not None and tracker.was_cancelled(task):
        tracker.record(rules.not_run(jid))
        return False
    tracker.record(rules.started(jid, job))
    return True


def _ended(tracker: Tracker, jid: str, exc: BaseException, *, interrupted: bool) -> None:
    """Record a run that raised ``exc``."""
    if interrupted:
        tracker.record(
            transitions.status(jid, EventStatus.ERROR, "interrupted by shutdown"),
            transitions.status(jid, EventStatus.ENQUEUE, "pushed back to its queue; it will run again"),
        )
    elif isinstance(exc, JobFailed):
        tracker.record(rules.failed(jid, exc))
    elif isinstance(exc, JobInterrupted):
        tracker.record(_interrupted(jid, exc))
    else:
        # Written with the runtime's decision (a retry's "waiting for retry"), never alone.
        tracker.record_pending(rules.errored(jid, exc))


def _cancelled_from_outside() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
