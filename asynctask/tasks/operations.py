"""Cancelling, retrying and tuning tasks (the write side of the read model); a task is created
in ``tasks.creation``."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Engine,
    case,
    select,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from asynctask import payload
from asynctask.brokers import callback_pusher, hold_releaser
from asynctask.client import Client
from asynctask.db.engine import writer
from asynctask.errors import JobsNotSent, TaskNotFed, TaskNotFound, TaskStateError, TaskWaiting
from asynctask.feeds import FEED_FIELD, Feed, FeedChange, FeedState
from asynctask.job_spec import JobSpec
from asynctask.tasks import jobs, runtime, runtime_callbacks
from asynctask.tasks.event_rows import shown_key
from asynctask.tasks.itemkeys import tenant_prefix
from asynctask.tasks.runtime import OutgoingJob, RuntimeJob
from asynctask.tracking import callbacks, parents, transitions
from asynctask.tracking.eta import RATE_MARK, RateMark
from asynctask.tracking.models import Event, Task
from asynctask.tracking.status import UNDONE, EventStatus, TaskState
from asynctask.tracking.store import CANCEL_NEWS_AGE

logger = logging.getLogger("asynctask.tracking")


def cancel_task(
    engine: Engine,
    client: Client,
    task_id: str,
    *,
    tenant: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Cancel a task: its waiting and stopped jobs never run and become ``cancelled``; return
    how many.

    The broker first: from then on no worker starts a job of the task (workers check the set of
    cancelled tasks when they claim a job, a resumed one too); its stopped jobs leave the
    stopped set. Running resumable jobs stop at their next checkpoint; others finish unless
    their code checks ``current_job().cancelled`` (jobs of another runtime likewise). Then
    SQL: waiting and stopped events become ``cancelled``, marked with the current stream
    position so that older transitions still in flight (a resume's ``enqueue`` among them)
    cannot undo it.
    """
    task = _require(engine, task_id, tenant)
    position = client.broker.tracking.cancel_task(task_id)
    if task.runtime is not None:
        # Another runtime's workers start jobs on cancellation news at most this old: after
        # the wait, none of them starts a job of the task.
        sleep(CANCEL_NEWS_AGE)
    if task.feed is not None:
        # After the mark: a job released meanwhile is skipped by the worker that claims it.
        client.broker.feeds.cancel(task_id)
    jobs.drop_stopped(client, task_id)
    now = datetime.now(UTC)
    moved: dict[EventStatus, int] = {}
    # Another runtime's jobs that started before the cancel recorded their run in transitions
    # numbered before it, perhaps not applied yet: those must still apply. Its jobs that never
    # start record ``cancelled`` themselves when their worker skips them, numbered after.
    marked = (
        Event.seq if task.runtime is not None else case((Event.seq < position, position), else_=Event.seq)
    )
    with writer(engine).begin() as connection:
        for status in (EventStatus.ENQUEUE, EventStatus.STOPPED):
            moved[status] = connection.execute(
                update(Event)
                .where(Event.task_id == task_id, Event.status == status.value)
                .values(
                    status=EventStatus.CANCELLED.value,
                    seq=marked,
                    finished_at=now,
                    updated_at=now,
                )
                .execution_options(synchronize_session=False)
            ).rowcount
        cancelled = sum(moved.values())
        connection.execute(
            update(Task)
            .where(Task.id == task_id)
            .values(
                state=TaskState.CANCELLED.value,
                cancelled_at=case((Task.cancelled_at.is_(None), now), else_=Task.cancelled_at),
                # A task waiting for others was dropped from its feed above: their ends leave it be.
                hold=case(
                    (Task.hold.in_([parents.WAITING, *parents.DUE_HOLDS]), parents.DROPPED), else_=Task.hold
                ),
                count_enqueue=Task.count_enqueue - moved[EventStatus.ENQUEUE],
                count_stopped=Task.count_stopped - moved[EventStatus.STOPPED],
                count_cancelled=Task.count_cancelled + cancelled,
                finished_at=case(
                    (
                        Task.count_working == 0,
                        case((Task.finished_at.is_(None), now), else_=Task.finished_at),
                    ),
                    else_=None,
                ),
            )
        )
        ended = connection.execute(
            select(Task.callbacks, Task.children).where(Task.id == task_id, Task.finished_at.is_not(None))
        ).first()
        settled = parents.settle(connection, [task_id] if ended is not None and ended.children else [])
        due = callbacks.fire(
            connection, ([task_id] if ended is not None and ended.callbacks else []) + settled.ended
        )
    failures: tuple[type[BaseException], ...] = (SQLAlchemyError, *client.broker.errors)
    try:
        if due:
            callback_pusher(client.broker).push_due(engine, due)
            runtime_callbacks.send_due(engine, client.registry, due)
        if settled.holds:
            hold_releaser(client.broker).release_due(engine, settled.holds)
    except failures as exc:
        # The cancel holds: what is left due the broker's next sweep does.
        logger.warning("task %s: its callbacks or children are left for the next sweep: %s", task_id, exc)
    return int(cancelled)


def retry_task(
    engine: Engine, client: Client, task_id: str, *, tenant: str | None = None, sends_elsewhere: bool = True
) -> int:
    """Run the task's ``failed`` and ``error`` jobs again (same jids and args); return how many.

    Each goes back to ``enqueue`` through the tracking stream, recorded in the same broker
    transaction as its push; SQL shows it at once too (so a poll right after the retry
    does not see the task finished), marked with the stream position read before, so that
    the stream's own record of the retry, and everything after it, still applies.
    """
    task = _require(engine, task_id, tenant)
    if task.state == TaskState.CANCELLED:
        raise TaskStateError(f"task {task_id} is cancelled; its jobs cannot be retried")
    if task.runtime is not None and not sends_elsewhere:
        raise sent_blocking(task.runtime)
    # Read before the events: an event still failed/error at or below this position when SQL
    # is updated below was among those read, so it was pushed again.
    position = client.broker.tracking.position()
    with engine.connect() as connection:
        rows = connection.execute(
            select(Event.job_id, Event.params, Event.flow)
            .where(
                Event.task_id == task_id,
                Event.status.in_([status.value for status in UNDONE]),
            )
            .order_by(Event.id)
        ).all()
    if not rows:
        return 0
    definition = client.registry.get(task.job_name) if task.job_name in client.registry else None
    if task.runtime is not None:
        return _retry_elsewhere(engine, client, task, definition, rows, position)
    head = definition.options.payload_head() if definition else {"retry": True}
    head = {**head, "queue": task.queue, "task": task_id}
    if task.feed is not None:
        head = {**head, FEED_FIELD: task_id}
    created = payload.now()
    jobs = [
        {
            **head,
            # The key, limit and rate it was created with (the job's options as they were then).
            **(row.flow or {}),
            "args": list(row.params or []),
            "class": task.job_name,
            "jid": row.job_id,
            "created_at": created,
        }
        for row in rows
    ]
    recorded = [
        transitions.status(item["jid"], EventStatus.ENQUEUE, _retried(item, task.tenant)).encode()
        for item in jobs
    ]
    client.broker.push([(item, None) for item in jobs], transitions=recorded, atomic=True)
    _show_retried(engine, task_id, position)
    return len(jobs)


def _retry_elsewhere(
    engine: Engine,
    client: Client,
    task: Any,
    definition: JobSpec[Any] | None,
    rows: Sequence[Any],
    position: int,
) -> int:
    """Send a task's failed jobs again through the runtime that runs them. Their ``enqueue``
    goes through the tracking store first, so it is ordered before anything their new run
    records; jobs the runtime then refuses end ``error`` "not sent" after it."""
    if not isinstance(definition, RuntimeJob) or definition.runtime != task.runtime:
        raise TaskStateError(
            f"task {task.id}'s jobs run on {task.runtime}: register {task.job_name!r} with "
            f"asynctask.integrations.{task.runtime}.submittable in this process to retry them"
        )
    outgoing = [OutgoingJob(row.job_id, task.id, list(row.params or [])) for row in rows]
    client.broker.tracking.write_transitions(
        [transitions.status(job.jid, EventStatus.ENQUEUE, "retried by request").encode() for job in outgoing]
    )
    _show_retried(engine, task.id, position)
    sent = 0
    try:
        for start in range(0, len(outgoing), runtime.SEND_BATCH):
            batch = outgoing[start : start + runtime.SEND_BATCH]
            try:
                definition.sender.send(batch)
            except runtime.PartlySent as exc:
                sent += exc.sent
                raise exc.cause from exc
            sent += len(batch)
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        client.broker.tracking.write_transitions(
            [
                transitions.status(job.jid, EventStatus.ERROR, f"not sent: {reason}").encode()
                for job in outgoing[sent:]
            ]
        )
        raise JobsNotSent(task.id, sent, len(outgoing), reason) from exc
    return len(outgoing)


def sent_blocking(runtime_name: str) -> TypeError:
    """The refusal of a call awaited on an event loop that would send jobs with another
    runtime's own client, which blocks."""
    return TypeError(
        f"jobs of {runtime_name} are sent with its own client, which blocks: call create_task and "
        "retry_task for them in a thread (asyncio.to_thread)"
    )


def _retried(item: payload.JobDict, tenant: str | None) -> str:
    """The message of a retried job's ``enqueue``: a keyed job may wait for its key again."""
    key = item.get("concurrency_key")
    if not isinstance(key, str):
        return "retried by request"
    return f"retried by request; waiting for {shown_key(key, tenant_prefix(tenant))}"


def _show_retried(engine: Engine, task_id: str, position: int) -> None:
    now = datetime.now(UTC)
    moved: dict[EventStatus, int] = {}
    with writer(engine).begin() as connection:
        for status in UNDONE:
            moved[status] = connection.execute(
                update(Event)
                .where(Event.task_id == task_id, Event.status == status.value, Event.seq <= position)
                .values(status=EventStatus.ENQUEUE.value, seq=position, finished_at=None, updated_at=now)
                .execution_options(synchronize_session=False)
            ).rowcount
        if any(moved.values()):
            connection.execute(
                update(Task)
                .where(Task.id == task_id)
                .values(
                    count_failed=Task.count_failed - moved[EventStatus.FAILED],
                    count_error=Task.count_error - moved[EventStatus.ERROR],
                    count_lost=Task.count_lost - moved[EventStatus.LOST],
                    count_enqueue=Task.count_enqueue + sum(moved.values()),
                    finished_at=None,
                )
            )


def _require(engine: Engine, task_id: str, tenant: str | None) -> Any:
    if "\x00" in task_id:
        raise TaskNotFound(task_id)
    query = select(
        Task.id,
        Task.state,
        Task.job_name,
        Task.queue,
        Task.tenant,
        Task.feed,
        Task.runtime,
        Task.finished_at,
        Task.count_finish,
        Task.count_failed,
        Task.count_error,
        Task.hold,
    ).where(Task.id == task_id)
    if tenant is not None:
        query = query.where(Task.tenant == tenant)
    with engine.connect() as connection:
        row = connection.execute(query).first()
    if row is None:
        raise TaskNotFound(task_id)
    return row


def update_task(
    engine: Engine, client: Client, task_id: str, change: FeedChange, *, tenant: str | None = None
) -> FeedState | None:
    """Change a fed task's feed while it runs (see ``asynctask.feeds``); return the feed now,
    or None if its jobs are all released and ended (the broker has forgotten it).

    The task row keeps the settings and a rate mark (when, and how many jobs had ended then):
    the ETA measures the rate since the change once enough jobs have ended (``tracking.eta``).

    Raises TaskNotFed for a task that has no feed, TaskStateError for one that is cancelled,
    aborted or finished."""
    task = _require(engine, task_id, tenant)
    if task.feed is None:
        raise TaskNotFed(f"task {task_id} is not fed: it was created without parallel")
    if task.state in (TaskState.CANCELLED, TaskState.ABORTED) or task.finished_at is not None:
        raise TaskStateError(f"task {task_id} has ended; its feed cannot change")
    if change.paused is not None and task.hold in (parents.WAITING, *parents.DUE_HOLDS):
        raise TaskWaiting(f"task {task_id} waits for its parents: its feed resumes when they have ended")
    mark = RateMark(datetime.now(UTC), task.count_finish + task.count_failed + task.count_error)
    state = client.broker.feeds.update(task_id, change)
    # The broker holds the feed that acts; the task row keeps what the read model shows.
    shown = state.feed if state is not None else Feed.from_dict(task.feed).changed(change)
    stored = {**shown.as_dict(), RATE_MARK: mark.as_json()}
    with writer(engine).begin() as connection:
        connection.execute(update(Task).where(Task.id == task_id).values(feed=stored))
    return state
