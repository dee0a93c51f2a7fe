"""Work a running job adds to its own task (``current_job().task.add``).

The export of unknown size: one job counts the rows, then adds the jobs that export them, and
the task ends only once they have all ended. One SQL transaction per call, all or nothing as
``create_task``: each batch of the items (``creation.BATCH``) gets its ``enqueue`` events, its
``TaskAddition`` row and, on a SQL broker, its job rows; then the task's counts grow by what
was added, if the task is neither cancelled nor ended. A fed task's added jobs join its feed,
held behind those it holds, released as it has room. The adding job's own event has not
ended while it runs, so its task cannot end before the added events exist. On Redis the jobs
are pushed after the commit (``brokers.addition_pusher``); a job that dies between the two
leaves them due, for its next run or a flusher's look to push, once.

A call is known by its key (``context.JobContext``): the adding job's id, the checkpoint it had
reached, and the call's place among those it made since. A job run again (a retry, a resume
from the same checkpoint) that makes the same call gets the jobs the first run added, and adds
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from asynctask import payload
from asynctask.brokers import addition_pusher
from asynctask.brokers.base import Staging
from asynctask.client import Client
from asynctask.db.engine import create_database_engine, writer
from asynctask.errors import TaskNotFound, TaskStateError
from asynctask.fairness import share_of
from asynctask.feeds import FEED_FIELD, Feed
from asynctask.registry import Registry
from asynctask.settings import Settings
from asynctask.tasks import creation, runtime
from asynctask.tasks.event_rows import event_rows
from asynctask.tasks.options import TaskOptions
from asynctask.tasks.runtime import RuntimeJob
from asynctask.tracking import additions
from asynctask.tracking.additions import AdditionPusher
from asynctask.tracking.models import Task

logger = logging.getLogger("asynctask.tracking")


@dataclass(frozen=True)
class Adding:
    """What one process adds with: a client of its broker and the tracking database's engine."""

    client: Client
    engine: Engine

    @classmethod
    def open(cls, settings: Settings, registry: Registry) -> Adding:
        return cls(Client(settings, registry=registry), create_database_engine(settings.database_url))

    def add(
        self, task_id: str, call: str, items: Iterable[Any], job: object | None, chunk_size: int | None
    ) -> list[str]:
        return add(self.engine, self.client, task_id, call, items, job, chunk_size)

    def close(self) -> None:
        self.client.close()
        self.engine.dispose()


def add(
    engine: Engine,
    client: Client,
    task_id: str,
    call: str,
    items: Iterable[Any],
    job: object | None = None,
    chunk_size: int | None = None,
) -> list[str]:
    """Add ``items`` to task ``task_id`` in jobs of ``chunk_size`` items (the task's own by
    default) of ``job`` (the task's own by default); return the new jobs' ids, in item order.
    ``call``: the call's key."""
    with engine.connect() as connection:
        columns = (Task.job_name, Task.tenant, Task.chunk_size, Task.feed, Task.runtime)
        task = connection.execute(select(*columns).where(Task.id == task_id)).first()
        if task is None:
            raise TaskNotFound(task_id)
        earlier = additions.made(connection, call)
    pusher = addition_pusher(client.broker)
    if earlier is not None:
        return _repeated(engine, pusher, *earlier)
    if task.runtime is not None:
        raise ValueError(f"task {task_id} runs on {task.runtime}: jobs are added to AsyncTask's tasks")
    definition = runtime.resolve(job if job is not None else task.job_name, client.registry)
    if isinstance(definition, RuntimeJob):
        raise ValueError(f"{definition.name} runs on {definition.runtime}: added jobs run on AsyncTask's")
    if definition.options.flow.active:
        raise ValueError(
            f"{definition.name} has a concurrency key, rate limit or unique key: added jobs go "
            "straight to their queue"
        )
    size = task.chunk_size if chunk_size is None else TaskOptions(chunk_size=chunk_size).chunk_size
    read = creation.batches(items, size, None)
    chunks = next(read, None)
    if chunks is None:
        return []
    definition.check_args([chunks[0].items])
    created = payload.now()
    head = {**definition.options.payload_head(), "task": task_id}
    # A fed task's added jobs join its feed, behind the jobs it holds.
    feed = Feed.from_dict(task.feed) if task.feed is not None else None
    if feed is not None:
        head[FEED_FIELD] = task_id
    flow = creation.chunk_flow(definition, definition.options.flow, creation.PLAIN)
    queue = str(head["queue"])
    share = share_of(task_id, task.tenant)
    staging = client.broker.staging(task_id, feed, share) if pusher is None else None
    at = datetime.fromtimestamp(created, UTC)
    added: list[str] = []
    ids: list[int] = []
    items_added = 0
    try:
        with creation.collector_paused(), writer(engine).begin() as connection:
            with event_rows(connection, task_id, definition.name, at, False) as events:
                while chunks is not None:
                    jobs = creation.chunk_jobs(client, head, definition.name, created, chunks, flow)
                    events.write(jobs)
                    events.settle()
                    jids = [str(job["jid"]) for job in jobs]
                    texts = _written(staging, jobs, client.settings.max_payload_bytes, connection, created)
                    part = len(ids)
                    ids.append(
                        additions.record(
                            connection, task_id, call, part, queue, share, jids, texts, feed is not None
                        )
                    )
                    added += jids
                    items_added += sum(len(chunk.items) for chunk in chunks)
                    chunks = next(read, None)
            grown = connection.execute(
                update(Task)
                .where(Task.id == task_id, Task.finished_at.is_(None), Task.cancelled_at.is_(None))
                .values(
                    total=Task.total + len(added),
                    count_enqueue=Task.count_enqueue + len(added),
                    items=Task.items + items_added,
                )
                .returning(Task.id)
            ).first()
            if grown is None:
                raise TaskStateError(f"task {task_id} was cancelled or has ended: nothing was added to it")
    except IntegrityError:
        if staging is not None:
            staging.discard()
        with engine.connect() as connection:
            earlier = additions.made(connection, call)
        if earlier is None:
            raise
        # Another run of the job made the same call at the same time, and committed first.
        return _repeated(engine, pusher, *earlier)
    except BaseException:
        if staging is not None:
            staging.discard()
        raise
    if staging is not None:
        staging.publish()
    else:
        _push(engine, client, pusher, task_id, ids)
    return added


def _written(
    staging: Staging | None,
    jobs: list[payload.JobDict],
    limit: int,
    connection: Connection,
    created: float,
) -> list[str] | None:
    """The batch's jobs as the broker takes them: written by ``staging`` in the transaction
    (None is returned), or their payloads, to be pushed once it committed."""
    if staging is not None:
        staging.write(staging.encode(jobs), connection)
        return None
    for job in jobs:
        job["enqueued_at"] = created
    return payload.dumps_many_within(jobs, limit)


def _push(
    engine: Engine, client: Client, pusher: AdditionPusher | None, task_id: str, ids: Sequence[int]
) -> None:
    """Push the committed additions ``ids``. A failure is logged: they stay due, and the job's
    next run or a flusher's look pushes them."""
    if pusher is None or not ids:
        return
    failures: tuple[type[BaseException], ...] = (SQLAlchemyError, *client.broker.errors)
    try:
        pusher.push_due(engine, ids)
    except failures as exc:
        logger.warning("task %s: the jobs added to it are left for the next look: %s", task_id, exc)


def _repeated(engine: Engine, pusher: AdditionPusher | None, jids: list[str], due: list[int]) -> list[str]:
    """An earlier run's call, found: push what it left due; its jobs' ids."""
    if due and pusher is not None:
        pusher.push_due(engine, due)
    return jids
