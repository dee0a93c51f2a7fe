"""What the read model returns: plain frozen dataclasses, ready to serialise."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar


@dataclass(frozen=True, slots=True)
class MessageView:
    at: datetime
    status: str
    text: str


@dataclass(frozen=True, slots=True)
class EventView:
    id: int
    job_id: str
    task_id: str | None
    job_name: str | None
    status: str
    params: list[Any] | None
    attempt: int
    error: str | None
    error_class: str | None
    progress_done: int | None
    progress_total: int | None
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime | None
    #: The message log, oldest first; empty when not asked for.
    messages: tuple[MessageView, ...] = ()
    #: Messages older than the first of ``messages`` that a read left out (``tracking.shown``).
    earlier_messages: int = 0
    #: Items of its chunk run one by one (``asynctask.each``) that ended well and that failed,
    #: over every run; None for a job that did not run its items so.
    items_done: int | None = None
    items_failed: int | None = None


@dataclass(frozen=True, slots=True)
class CallbackView:
    """A job its task pushes once when it ends (``create_task(on_complete=...)``)."""

    #: complete / success / failure.
    kind: str
    job_name: str
    jid: str
    #: waiting (the task has not ended, or ended so that it does not apply), due (to be
    #: pushed), pushed.
    state: str
    fired_at: datetime | None


@dataclass(frozen=True, slots=True)
class ParentView:
    """A task this one waits for (``create_task(after=[...])``)."""

    task_id: str
    job_name: str
    #: When this task saw it end; None while it has not.
    ended_at: datetime | None
    #: Whether it had ended ``finished``; None while it has not ended.
    succeeded: bool | None


@dataclass(frozen=True, slots=True)
class ChildView:
    """A task that waits for this one."""

    task_id: str
    job_name: str
    #: What holds its jobs: waiting, releasing, released, dropping, dropped.
    hold: str


@dataclass(frozen=True, slots=True)
class ItemCounts:
    """A task's items: how many its chunks hold, and of those its jobs ran one by one
    (``asynctask.each``), how many ended well and how many failed."""

    total: int
    done: int
    failed: int


@dataclass(frozen=True, slots=True)
class FailedItemView:
    """An item that failed in its job's chunk, and why."""

    id: int
    job_id: str
    #: Its place in the job's chunk, from 0.
    position: int
    #: The item, or its JSON text cut to a few KB when it is large.
    item: Any
    message: str
    at: datetime


@dataclass(frozen=True, slots=True)
class FeedView:
    """A fed task's feed: its settings as last set, and how many of its jobs are held back."""

    parallel: int
    interval: float
    priority: int
    paused: bool
    #: Jobs not released yet, as the broker counts them; 0 once the task has ended; None when
    #: the broker was not asked (``list_tasks``, the SQL-only ``queries``) or could not answer.
    held: int | None


@dataclass(frozen=True, slots=True)
class TaskWarning:
    """Something ``create_task`` found worth telling about the task it created, though not an
    error: ``code`` is stable (``no_worker``), ``message`` is for people."""

    code: str
    message: str


@dataclass(frozen=True, slots=True)
class TaskView:
    id: str
    job_name: str
    queue: str
    tenant: str | None
    meta: dict[str, Any] | None
    #: creating / aborted / pending / running / finished / finished_with_errors / cancelled.
    #: "creating" and "aborted" mean create_task did not complete: none of the task's jobs
    #: runs (if its jobs were in fact pushed, the first one to start turns it "running"). A
    #: task with stopped jobs is "running" until they are resumed and done, or it is cancelled.
    status: str
    #: Jobs in the task.
    total: int
    #: Jobs per event status (enqueue, working, finish, failed, error, cancelled, stopped).
    counts: dict[str, int]
    #: Jobs that will not run again: finish + failed + error + cancelled (stopped ones will,
    #: once resumed).
    done: int
    #: From 0.0 to 1.0: the items run (done or failed) out of ``items.total`` once any job ran
    #: its items one by one (``asynctask.each``), else the jobs ``done`` out of ``total``.
    progress: float
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancelled_at: datetime | None
    #: Seconds until every job is done at the rate its jobs have been ending at (see
    #: ``tracking.eta``); None before any job has ended, while the task is paused or only
    #: stopped jobs are left, and once it is no longer running.
    eta_seconds: float | None
    #: The task's feed (``create_task(parallel=...)``), or None for a task that is not fed.
    feed: FeedView | None
    #: The first failed or error events (by creation order), with their messages.
    errors: tuple[EventView, ...]
    #: About how many jobs of its queue start before the task's next one, as its broker
    #: estimates them (``Broker.jobs_ahead``); None when no job of it waits in the queue, or
    #: where only the database was read (task lists, streams).
    ahead: int | None = None
    #: The task's items, counted one by one where its jobs ran them so.
    items: ItemCounts = ItemCounts(0, 0, 0)
    #: What ``create_task`` warned about as it created the task (``TaskWarning``); empty in
    #: every other read.
    warnings: tuple[TaskWarning, ...] = ()
    #: The runtime that runs its jobs ("celery", "rq", "dramatiq"); None: AsyncTask's own.
    runtime: str | None = None
    #: Its callbacks (``create_task(on_complete=...)``), in the order given; read by
    #: ``get_task`` only, empty in lists and streams.
    callbacks: tuple[CallbackView, ...] = ()
    #: For a task created with ``after``: ``success`` or ``complete``; None for any other.
    run_if: str | None = None
    #: What holds its jobs while it waits for its parents (waiting, then released, or dropped
    #: when it was cancelled: ``releasing`` and ``dropping`` are on their way); None for a task
    #: without parents.
    hold: str | None = None
    #: Why it was cancelled without anyone asking: the parent that did not succeed.
    cancel_reason: str | None = None
    #: The tasks it waits for, in the order given, and the first ``CHILDREN_SHOWN`` of those
    #: that wait for it (``children_count`` counts them all); read by ``get_task`` only.
    parents: tuple[ParentView, ...] = ()
    children: tuple[ChildView, ...] = ()
    children_count: int = 0


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: tuple[T, ...]
    #: Pass as ``after`` (events) or ``before`` (tasks) for the next page; None at the end.
    next_cursor: str | None
