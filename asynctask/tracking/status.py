"""The states of a tracked job (an Event) and of a Task, as the database and the HTTP API spell them."""

from __future__ import annotations

from enum import StrEnum


class EventStatus(StrEnum):
    #: Waiting in a queue, in the schedule, or for a retry.
    ENQUEUE = "enqueue"
    WORKING = "working"
    FINISH = "finish"
    #: A business failure: the job raised ``asynctask.JobFailed``. Never retried.
    FAILED = "failed"
    #: A crash (any other exception) that will not be retried, or a shutdown interruption
    #: that is followed by ``enqueue`` at once.
    ERROR = "error"
    #: The task was cancelled before this job started.
    CANCELLED = "cancelled"
    #: A resumable job stopped by ``stop_job``, kept with its checkpoint until resumed.
    STOPPED = "stopped"
    #: The job vanished with the broker's data (Redis restarted empty): it exists nowhere and
    #: will not run, unless ``retry_task`` pushes it again.
    LOST = "lost"


#: A job in one of these will not run again unless someone asks (``retry_task``).
TERMINAL = frozenset(
    {EventStatus.FINISH, EventStatus.FAILED, EventStatus.ERROR, EventStatus.CANCELLED, EventStatus.LOST}
)
#: A job that ended in one of these did not do its work: its task ends ``finished_with_errors``,
#: its error is among the task's first errors, and ``retry_task`` runs it again.
UNDONE = (EventStatus.FAILED, EventStatus.ERROR, EventStatus.LOST)


class TaskState(StrEnum):
    """Where the task's creation stands; its progress comes from the event counts."""

    #: Task and events are written, jobs not pushed yet. If ``create_task`` failed midway the
    #: task stays here (or ``aborted``) and none of its jobs runs.
    CREATING = "creating"
    #: ``create_task`` could not push the jobs and said so; no job of the task exists.
    ABORTED = "aborted"
    READY = "ready"
    CANCELLED = "cancelled"


class TaskStatus(StrEnum):
    """What ``get_task`` reports."""

    CREATING = "creating"
    ABORTED = "aborted"
    #: Created, no job has started yet.
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    #: Every job is done, and some ended ``failed``, ``error`` or ``lost``.
    FINISHED_WITH_ERRORS = "finished_with_errors"
    CANCELLED = "cancelled"
