"""What each moment of a tracked job's run is recorded as: the one set of status rules, used by
AsyncTask's own tracking middleware and retrier and by the runs of jobs other runtimes run
(``middleware.runs``), so that a task reads the same whatever runtime ran its jobs.
"""

from __future__ import annotations

from typing import Any

from asynctask import payload
from asynctask.errors import JobFailed, error_class_name
from asynctask.tracking import transitions
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import Transition

#: The message of a job skipped because its task was cancelled before it started.
NOT_RUN = "task cancelled; not run"


def describe(exc: BaseException) -> str:
    """``Type: text``, or the type alone when the exception says nothing."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def not_run(jid: str) -> Transition:
    return transitions.status(jid, EventStatus.CANCELLED, NOT_RUN)


def started(jid: str, job: payload.JobDict) -> Transition:
    """``working``; a job outside a task also brings what its event row is created from."""
    standalone: dict[str, Any] = {}
    if not isinstance(job.get("task"), str):
        args = job.get("args")
        standalone = {"name": str(job.get("class")), "params": args if isinstance(args, list) else None}
    return transitions.status(jid, EventStatus.WORKING, "started", **standalone)


def finished(jid: str) -> Transition:
    return transitions.status(jid, EventStatus.FINISH, "finished")


def failed(jid: str, exc: JobFailed) -> Transition:
    """A business failure: final, never retried."""
    return transitions.status(
        jid, EventStatus.FAILED, str(exc) or "failed", error_class=error_class_name(exc)
    )


def errored(jid: str, exc: BaseException) -> Transition:
    """A crash: the runtime decides whether it runs again (``waiting_for_retry`` / ``gave_up``)."""
    return transitions.status(jid, EventStatus.ERROR, describe(exc), error_class=error_class_name(exc))


def waiting_for_retry(jid: str, attempt: int, limit: int | None) -> Transition:
    """The runtime will run it again: retry ``attempt`` (from 1) of ``limit`` (None: a runtime
    that decides at each failure, with no count known in advance)."""
    of = f" of {limit}" if limit is not None else ""
    return transitions.status(jid, EventStatus.ENQUEUE, f"waiting for retry {attempt}{of}")


def gave_up(jid: str, outcome: str) -> Transition:
    """The runtime will not run a job that raised again: it stays ``error``; ``outcome`` says
    where it went."""
    return Transition(jid, transitions.LOG, payload.now(), outcome)
