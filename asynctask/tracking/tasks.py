"""Creating, cancelling and retrying tasks (the write side of the read model).

``create_task`` is all or nothing:
1. one SQL transaction writes the task (state ``creating``) and all its events;
2. one MULTI/EXEC pushes all its jobs (Redis runs all of it or none of it);
3. the task turns ``ready``.
If step 2 fails the task is marked ``aborted`` and the error is raised: no job of it exists.
If step 3 fails the jobs are queued and the task says ``creating`` until the first of them
starts, which turns it ``ready`` (any transition of a task's job proves its jobs exist).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, case, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from asynctask import payload
from asynctask.client import Client
from asynctask.errors import TaskNotFound, TaskStateError
from asynctask.job import JobDefinition
from asynctask.tracking import transitions
from asynctask.tracking.database import writer
from asynctask.tracking.models import Event, Task
from asynctask.tracking.status import EventStatus, TaskState

logger = logging.getLogger("asynctask.tracking")

#: Event rows per INSERT statement batch (SQLite).
INSERT_BATCH = 5000
EVENT_COLUMNS = (
    "job_id",
    "task_id",
    "job_name",
    "status",
    "params",
    "attempt",
    "seq",
    "progress_seq",
    "enqueued_at",
    "updated_at",
)


def new_task_id() -> str:
    """128 random bits, URL-safe: a task id is safe to show to a browser."""
    return secrets.token_urlsafe(16)


def create_task(
    engine: Engine,
    client: Client,
    job: JobDefinition[Any] | str,
    items: Iterable[Any],
    *,
    chunk_size: int = 1,
    tenant: str | None = None,
    queue: str | None = None,
    meta: Mapping[str, Any] | None = None,
) -> str:
    """Split ``items`` into jobs of ``chunk_size`` items (each job gets its chunk, a list, as
    its one argument), record the task and its events, push the jobs; return the task id."""
    definition = job if isinstance(job, JobDefinition) else client.registry.get(job)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError("chunk_size must be a positive integer")
    values = list(items)
    if not values:
        raise ValueError("a task needs at least one item")
    payload.check_args(values)
    if meta is not None:
        payload.check_args([dict(meta)])
    chunks = [values[i : i + chunk_size] for i in range(0, len(values), chunk_size)]
    definition.check_args([chunks[0]])
    task_id = new_task_id()
    options = definition.options.merged({"queue": queue}) if queue else definition.options
    head = {**options.payload_head(), "task": task_id}
    created = payload.now()
    jobs = [
        {**head, "args": [chunk], "class": definition.name, "jid": jid, "created_at": created}
        for chunk, jid in zip(chunks, payload.new_jids(len(chunks)), strict=True)
    ]
    jobs = [_through_middleware(client, item) for item in jobs]

    at = datetime.fromtimestamp(created, UTC)
    with writer(engine).begin() as connection:
        connection.execute(
            insert(Task).values(
                id=task_id,
                job_name=definition.name,
                queue=options.queue,
                tenant=tenant,
                meta=dict(meta) if meta is not None else None,
                state=TaskState.CREATING.value,
                total=len(jobs),
                chunk_size=chunk_size,
                count_enqueue=len(jobs),
                count_working=0,
                count_finish=0,
                count_failed=0,
                count_error=0,
                count_cancelled=0,
                created_at=at,
            )
        )
        if connection.dialect.name == "postgresql":
            _copy_events(connection, task_id, definition.name, at, jobs)
        else:
            rows = [
                {
                    "job_id": item["jid"],
                    "task_id": task_id,
                    "job_name": definition.name,
                    "status": EventStatus.ENQUEUE.value,
                    "params": item["args"],
                    "attempt": 0,
                    "seq": 0,
                    "progress_seq": 0,
                    "enqueued_at": at,
                    "updated_at": at,
                }
                for item in jobs
            ]
            for start in range(0, len(rows), INSERT_BATCH):
                connection.execute(insert(Event), rows[start : start + INSERT_BATCH])

    try:
        client.broker.push([(item, None) for item in jobs], atomic=True)
    except BaseException:
        _set_state(engine, task_id, TaskState.ABORTED)
        raise
    _set_state(engine, task_id, TaskState.READY)
    return task_id


def _copy_events(
    connection: Connection, task_id: str, name: str, at: datetime, jobs: list[payload.JobDict]
) -> None:
    """PostgreSQL's COPY, fed one text block: several times faster than INSERTs for a big task.

    Ids, status, numbers and the timestamp never need escaping; the name and params may.
    """
    head = f"\t{task_id}\t{_copy_text(name)}\t{EventStatus.ENQUEUE.value}\t"
    stamp = at.isoformat()
    tail = f"\t0\t0\t0\t{stamp}\t{stamp}\n"
    data = "".join(
        item["jid"] + head + _copy_text(json.dumps(item["args"], ensure_ascii=False)) + tail for item in jobs
    )
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    columns = ", ".join(EVENT_COLUMNS)
    with cursor.copy(f"COPY {Event.__tablename__} ({columns}) FROM STDIN") as copy:
        copy.write(data)


def _copy_text(value: str) -> str:
    """Escape a value for COPY's text format (backslash, and the tab/newline separators)."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def _through_middleware(client: Client, item: payload.JobDict) -> payload.JobDict:
    pushed = client.middleware.invoke(item, item["queue"], final=lambda: item)
    if pushed is None:
        raise ValueError("a client middleware dropped a job of the task; nothing was enqueued")
    return pushed


def _set_state(engine: Engine, task_id: str, state: TaskState) -> None:
    try:
        with writer(engine).begin() as connection:
            connection.execute(
                update(Task)
                .where(Task.id == task_id, Task.state == TaskState.CREATING.value)
                .values(state=state.value)
            )
    except SQLAlchemyError as exc:
        # The jobs' fate is settled either way (all pushed, or none): the task reads "creating"
        # until the first of its jobs starts (which turns it ready), as the read model says.
        logger.warning("task %s: could not mark it %s: %s", task_id, state.value, exc)


def cancel_task(engine: Engine, client: Client, task_id: str, *, tenant: str | None = None) -> int:
    """Cancel a task: its waiting jobs never run and become ``cancelled``; return how many.

    Redis first: from then on no worker starts a job of the task (workers check the set of
    cancelled tasks when they claim a job). Running jobs finish unless their code checks
    ``current_job().cancelled``. Then SQL: waiting events become ``cancelled``, marked with
    the current stream position so that older transitions still in flight cannot undo it.
    """
    _require(engine, task_id, tenant)
    keys = client.broker.keys
    pipe = client.redis.pipeline(transaction=True)
    pipe.hset(keys.cancelled_tasks, task_id, payload.now())
    pipe.incr(keys.cancel_generation)
    pipe.get(keys.tracking_seq)
    position = int(pipe.execute()[2] or 0)
    now = datetime.now(UTC)
    with writer(engine).begin() as connection:
        cancelled = connection.execute(
            update(Event)
            .where(Event.task_id == task_id, Event.status == EventStatus.ENQUEUE.value)
            .values(
                status=EventStatus.CANCELLED.value,
                seq=case((Event.seq < position, position), else_=Event.seq),
                finished_at=now,
                updated_at=now,
            )
            .execution_options(synchronize_session=False)
        ).rowcount
        connection.execute(
            update(Task)
            .where(Task.id == task_id)
            .values(
                state=TaskState.CANCELLED.value,
                cancelled_at=case((Task.cancelled_at.is_(None), now), else_=Task.cancelled_at),
                count_enqueue=Task.count_enqueue - cancelled,
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
    return int(cancelled)


def retry_task(engine: Engine, client: Client, task_id: str, *, tenant: str | None = None) -> int:
    """Run the task's ``failed`` and ``error`` jobs again (same jids and args); return how many.

    Each goes back to ``enqueue`` through the tracking stream, recorded in the same Redis
    transaction as its push, so counts adjust within a flush (about a second).
    """
    task = _require(engine, task_id, tenant)
    if task.state == TaskState.CANCELLED:
        raise TaskStateError(f"task {task_id} is cancelled; its jobs cannot be retried")
    with engine.connect() as connection:
        rows = connection.execute(
            select(Event.job_id, Event.params)
            .where(
                Event.task_id == task_id,
                Event.status.in_([EventStatus.FAILED.value, EventStatus.ERROR.value]),
            )
            .order_by(Event.id)
        ).all()
    if not rows:
        return 0
    definition = client.registry.get(task.job_name) if task.job_name in client.registry else None
    head = definition.options.payload_head() if definition else {"retry": True}
    head = {**head, "queue": task.queue, "task": task_id}
    created = payload.now()
    jobs = [
        {
            **head,
            "args": list(row.params or []),
            "class": task.job_name,
            "jid": row.job_id,
            "created_at": created,
        }
        for row in rows
    ]
    recorded = [
        transitions.status(item["jid"], EventStatus.ENQUEUE, "retried by request").encode() for item in jobs
    ]
    client.broker.push([(item, None) for item in jobs], transitions=recorded, atomic=True)
    return len(jobs)


def _require(engine: Engine, task_id: str, tenant: str | None) -> Any:
    query = select(Task.id, Task.state, Task.job_name, Task.queue).where(Task.id == task_id)
    if tenant is not None:
        query = query.where(Task.tenant == tenant)
    with engine.connect() as connection:
        row = connection.execute(query).first()
    if row is None:
        raise TaskNotFound(task_id)
    return row
