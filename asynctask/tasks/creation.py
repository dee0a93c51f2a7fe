"""Creating a task (the write side of the read model).

``create_task`` reads its items as a stream, about ``BATCH`` at a time, so memory is bounded
by a batch whatever the size of the task. It is all or nothing:
1. one SQL transaction writes the task (state ``creating``) and, batch by batch, its events;
   each batch's jobs are also staged by the broker where no worker takes them (Redis: the
   task's staging lists; SQL: job rows written in this same transaction). An invalid item,
   a job its middleware drops, or an error from the items' iterator rolls the transaction
   back and discards the staged jobs: nothing is written or enqueued. A broker error while
   staging does the same, then records the task alone as ``aborted``;
2. after the commit, the broker publishes every staged job at once (Redis: one Lua script
   moves them onto their queues, in the order one LPUSH of the whole bulk would give; SQL:
   the commit made them visible, publishing wakes idle workers);
3. the task turns ``ready``.
If step 2 fails the task is marked ``aborted`` and the error is raised: no job of it exists
(Redis staging lists expire within ``STAGING_TTL``). If step 3 fails the jobs are queued and
the task says ``creating`` until the first of them starts, which turns it ``ready`` (any
transition of a task's job proves its jobs exist).
"""

from __future__ import annotations

import gc
import logging
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from itertools import islice
from typing import Any, NamedTuple

from sqlalchemy import (
    Engine,
    insert,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from asynctask import payload, storable
from asynctask.brokers import callback_pusher, hold_releaser
from asynctask.client import Client
from asynctask.db.engine import writer
from asynctask.errors import JobsNotSent
from asynctask.fairness import share_of
from asynctask.feeds import FEED_FIELD, Feed
from asynctask.feeds.model import MAX_PARALLEL
from asynctask.flow.options import FlowOptions
from asynctask.job_spec import JobSpec
from asynctask.tasks import runtime, runtime_callbacks
from asynctask.tasks.event_rows import event_rows, write_waiting
from asynctask.tasks.itemkeys import ItemKey, ItemKeyError
from asynctask.tasks.options import TaskOptions
from asynctask.tasks.runtime import RuntimeJob
from asynctask.tasks.runtime_staging import RuntimeStaging
from asynctask.tracking import callbacks, parents
from asynctask.tracking.models import Task
from asynctask.tracking.status import TaskState

logger = logging.getLogger("asynctask.tracking")

#: Items per batch of ``create_task`` (``BATCH // chunk_size`` jobs, at least one): read,
#: checked, run through the client middleware, written to SQL and staged by the broker together.
BATCH = 2000


#: A task of one item per job, on its job's queue, neither keyed nor fed.
PLAIN = TaskOptions()


def new_task_id() -> str:
    """128 random bits in hex: safe in a URL, and never read as an option by a command line."""
    return secrets.token_hex(16)


def create_task(
    engine: Engine,
    client: Client,
    job: JobSpec[Any] | str | object,
    items: Iterable[Any],
    options: TaskOptions = PLAIN,
) -> str:
    """Split ``items`` into jobs of ``chunk_size`` items (each job gets its chunk, a list, as
    its one argument), record the task and its events, push the jobs; return the task id.
    A job that runs its chunk with ``asynctask.each`` gets one outcome per item: a failed item
    does not end its chunk, and the task counts items.

    ``items`` may be any iterable, read once, in batches: a generator over a file is never
    held in memory whole.

    ``concurrency_key``: a template over each item's fields (``"operator:{operator_id}"``,
    see ``itemkeys``) or a function of the item. A chunk then holds items of one key only
    (items of a key keep their order), and its job carries the key and ``concurrency_limit``:
    at most that many jobs of a key run at once, in the order of their items. With a
    ``tenant`` the key is the tenant's own (``itemkeys.tenant_prefix``).
    ``concurrency_on_failure="continue"`` lets a key's next job start while a failed one waits
    for its retry.

    The job's own concurrency key and rate limit (``@job(...)``) apply to each chunk job, with
    the chunk as its argument; a ``concurrency_key`` given here replaces the job's. Its unique
    options do not apply: a chunk left out as a duplicate would leave its task unfinished.

    ``parallel``: the task is fed. Its jobs are held by the broker and released so that at
    most ``parallel`` of them are queued or running at once, at most once per ``interval``
    seconds, at ``priority`` (lower runs first); ``update_task`` changes all three while the
    task runs (see ``asynctask.feeds``).

    ``after``: ids of tasks this one waits for (see ``tracking.parents``). It is created at
    once, its jobs held by a paused feed (its own ``parallel`` if given, else one that holds no
    job back once released) until every parent has ended; ``run_if="success"`` (the default)
    cancels it instead when a parent did not end ``finished``.

    ``job`` may also be another runtime's job (a Celery task, a Dramatiq actor, a function
    registered by ``asynctask.integrations.rq``): its chunks are then sent through that
    runtime's client once the task is committed (see ``tasks.runtime``).
    """
    feed = _feed(options)
    key_of = options.item_key
    definition = runtime.resolve(job, client.registry)
    elsewhere = definition if isinstance(definition, RuntimeJob) else None
    if elsewhere is not None and (feed is not None or key_of is not None):
        raise ValueError(
            f"{elsewhere.name} runs on {elsewhere.runtime}: parallel, interval, priority, "
            "concurrency_key and after need AsyncTask's own runtime"
        )
    read = batches(items, options.chunk_size, key_of)
    chunks = next(read, None)
    if chunks is None:
        raise ValueError("a task needs at least one item")
    definition.check_args([chunks[0].items])
    created = payload.now()
    task_callbacks = _callbacks(client, options, created)
    task_id = new_task_id()
    job_options = definition.options.merged({"queue": options.queue}) if options.queue else definition.options
    head = {**job_options.payload_head(), "task": task_id}
    payload.check_names({**head, "class": definition.name})
    if feed is not None:
        head[FEED_FIELD] = task_id
    flow = chunk_flow(definition, job_options.flow, options)
    at = datetime.fromtimestamp(created, UTC)
    task_row = {
        "id": task_id,
        "job_name": definition.name,
        "queue": job_options.queue,
        "tenant": options.tenant,
        "meta": dict(options.meta) if options.meta is not None else None,
        "state": TaskState.CREATING.value,
        "total": 0,
        "chunk_size": options.chunk_size,
        "count_enqueue": 0,
        "count_working": 0,
        "count_finish": 0,
        "count_failed": 0,
        "count_error": 0,
        "count_cancelled": 0,
        "count_stopped": 0,
        "count_lost": 0,
        "items": 0,
        "items_done": 0,
        "items_failed": 0,
        "created_at": at,
        # As the task's own settings say: a task that waits for others shows its hold apart.
        "feed": replace(feed, paused=False).as_dict() if feed is not None else None,
        "runtime": elsewhere.runtime if elsewhere is not None else None,
        "callbacks": len(task_callbacks),
    }
    # The first batch is ready before anything is written: bad input found there costs nothing.
    jobs = chunk_jobs(client, head, definition.name, created, chunks, flow)
    staging = (
        RuntimeStaging(elsewhere, engine, task_id)
        if elsewhere is not None
        else client.broker.staging(task_id, feed, share_of(task_id, options.tenant))
    )
    staging_error: BaseException | None = None
    try:
        with collector_paused(), writer(engine).begin() as connection:
            connection.execute(insert(Task).values(task_row))
            callbacks.record(connection, task_id, task_callbacks)
            linked = (
                parents.link(connection, task_id, options.after, options.run_if or "success", options.tenant)
                if options.after
                else None
            )
            held = parents.waiting_text(options.after) if options.after else None
            total = items_total = 0
            waiting = flow.keyed or flow.options.concurrency_key is not None or held is not None
            with event_rows(connection, task_id, definition.name, at, flow.active) as events:
                while True:
                    events.write(jobs)
                    # Encoded while the database stores the batch's events.
                    encoded = staging.encode(jobs)
                    if waiting or staging.commits_with_task:
                        events.settle()
                    if waiting:
                        write_waiting(connection, jobs, key_of.prefix if key_of else "", at, held)
                    try:
                        staging.write(encoded, connection)
                    except client.broker.errors as exc:
                        staging_error = exc
                        raise
                    total += len(jobs)
                    items_total += sum(len(chunk.items) for chunk in chunks)
                    chunks = next(read, None)
                    if chunks is None:
                        break
                    jobs = chunk_jobs(client, head, definition.name, created, chunks, flow)
            counts: dict[str, Any] = {"total": total, "count_enqueue": total, "items": items_total}
            if staging.commits_with_task:
                counts["state"] = TaskState.READY.value
            connection.execute(update(Task).where(Task.id == task_id).values(counts))
            due: list[int] = []
            if linked is not None and linked.cancel_reason is not None:
                parents.drop(connection, [task_id], linked.cancel_reason)
                due = callbacks.fire(connection, [task_id] if task_callbacks else [])
    except BaseException:
        staging.discard()
        if staging_error is not None:
            _record_aborted(engine, {**task_row, "state": TaskState.ABORTED.value})
        raise

    if staging.commits_with_task:
        # The jobs became claimable with the task, ready: nothing is left that could fail them.
        staging.publish()
        # The feed was created with the task: a parent's end after the commit acted on it.
        _follow_up(engine, client, task_id, due, linked is not None and linked.settled)
        return task_id
    try:
        staging.publish()
    except JobsNotSent:
        # Another runtime keeps what it took: the task runs those, and shows the rest not sent.
        _set_state(engine, client, task_id, TaskState.READY)
        raise
    except BaseException:
        _set_state(engine, client, task_id, TaskState.ABORTED)
        staging.discard()
        raise
    _set_state(engine, client, task_id, TaskState.READY)
    # A parent's end between the commit and the publish found no feed to act on: the creator does.
    _follow_up(engine, client, task_id, due, linked is not None)
    return task_id


def _feed(options: TaskOptions) -> Feed | None:
    """The task's feed: its own, or, for a task that waits for others, one that holds its jobs
    (paused until its parents have ended)."""
    feed = options.feed
    if not options.after:
        return feed
    return replace(feed or Feed(parallel=MAX_PARALLEL), paused=True)


def _follow_up(engine: Engine, client: Client, task_id: str, due: list[int], held: bool) -> None:
    """Once its jobs are published: push the callbacks of a task cancelled as it was created,
    and release or drop the jobs of a task whose parents have all ended already (a parent's end
    that came before the publish left that to the creator). A failure is logged: the broker's
    sweep does it later."""
    failures: tuple[type[BaseException], ...] = (SQLAlchemyError, *client.broker.errors)
    try:
        if due:
            callback_pusher(client.broker).push_due(engine, due)
            runtime_callbacks.send_due(engine, client.registry, due)
        if held:
            hold_releaser(client.broker).release_due(engine, [task_id])
    except failures as exc:
        logger.warning("task %s: its callbacks or held jobs are left for the next sweep: %s", task_id, exc)


class Chunk(NamedTuple):
    """The items of one job, and the concurrency key they share (as stored), if any."""

    items: list[Any]
    key: str | None = None


def batches(items: Iterable[Any], chunk_size: int, key_of: ItemKey | None) -> Iterator[list[Chunk]]:
    """The items' chunks, ``BATCH // chunk_size`` chunks (at least one) at a time, each batch
    checked to be JSON-native (TypeError names the culprit's position in ``items``)."""
    iterator = iter(items)
    size = max(1, BATCH // chunk_size) * chunk_size
    position = 0
    while values := list(islice(iterator, size)):
        try:
            payload.check_args(values)
        except TypeError:
            _raise_at(values, position)
            raise
        if storable.first_unstorable(values, "items") is not None:
            for index, value in enumerate(values):
                storable.check(value, "items", item=position + index)
        if key_of is None:
            yield [Chunk(values[start : start + chunk_size]) for start in range(0, len(values), chunk_size)]
        else:
            yield _keyed_chunks(values, chunk_size, key_of, position)
        position += len(values)


def _keyed_chunks(values: list[Any], chunk_size: int, key_of: ItemKey, position: int) -> list[Chunk]:
    """Chunks of one key each, in the order of their first item; a key's items keep their order
    across its chunks, which its line runs in push order."""
    filling: dict[str, list[Any]] = {}
    chunks: list[Chunk] = []
    for index, value in enumerate(values):
        try:
            key = key_of(value)
        except ItemKeyError as exc:
            raise ItemKeyError(f"items[{position + index}]: {exc}", exc.field) from None
        current = filling.get(key)
        if current is None or len(current) == chunk_size:
            current = filling[key] = []
            chunks.append(Chunk(current, key))
        current.append(value)
    return chunks


def _raise_at(values: list[Any], position: int) -> None:
    """Raise the TypeError of the first value of ``values`` that is not JSON-native, naming it
    ``items[n]`` by its position in the whole stream (the batch starts at ``position``)."""
    for index, value in enumerate(values):
        try:
            payload.check_args([value])
        except TypeError as exc:
            raise TypeError(str(exc).replace("args[0]", f"items[{position + index}]", 1)) from None


class ChunkFlow(NamedTuple):
    """What sets the flow-control keys of a task's chunk jobs."""

    definition: JobSpec[Any]
    #: The job's own options that apply to a chunk (inactive when none do).
    options: FlowOptions
    #: Written after the chunk's own key: its limit, and ``concurrency_on_failure``.
    keyed: dict[str, Any]

    @property
    def active(self) -> bool:
        """Whether any chunk job gets flow-control keys (most tasks: none, at no cost per job)."""
        return bool(self.keyed) or self.options.active

    def fields(self, chunk: Chunk) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.options.active:
            definition = self.definition
            out = self.options.payload_fields(definition.name, [chunk.items], definition.signature)
        if chunk.key is None:
            return out
        # The chunk's key first, where the job's own would stand (FIELDS order).
        return {"concurrency_key": chunk.key, **self.keyed, **out}


def chunk_flow(definition: JobSpec[Any], flow: FlowOptions, options: TaskOptions) -> ChunkFlow:
    kept = replace(flow, unique_for=None, unique_key=None, unique_until=None)
    if options.concurrency_key is None:
        return ChunkFlow(definition, kept, {})
    kept = replace(kept, concurrency_key=None, concurrency_limit=None, concurrency_on_failure=None)
    extra: dict[str, Any] = {"concurrency_limit": options.key_limit}
    if options.key_on_failure == "continue":
        extra["concurrency_on_failure"] = "continue"
    return ChunkFlow(definition, kept, extra)


def chunk_jobs(
    client: Client, head: payload.JobDict, name: str, created: float, chunks: list[Chunk], flow: ChunkFlow
) -> list[payload.JobDict]:
    """One job per chunk, through the client middleware."""
    if not flow.active:
        return [
            _through_middleware(
                client, {**head, "args": [chunk.items], "class": name, "jid": jid, "created_at": created}
            )
            for chunk, jid in zip(chunks, payload.new_jids(len(chunks)), strict=True)
        ]
    return [
        _through_middleware(
            client,
            # Options go before args, where Sidekiq's client puts a job's options.
            {**head, **flow.fields(chunk), "args": [chunk.items], "class": name, "jid": jid}
            | {"created_at": created},
        )
        for chunk, jid in zip(chunks, payload.new_jids(len(chunks)), strict=True)
    ]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a task's batches are built and written: each
    batch allocates thousands of containers, none in a cycle, and every few hundred would
    start a collection (a full one now and then, which walks the whole heap of the process,
    a web server's included). Left as found if something else had paused it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _record_aborted(engine: Engine, task_row: dict[str, Any]) -> None:
    """Record a task whose jobs the broker refused to stage: the task alone, ``aborted``, no job."""
    try:
        with writer(engine).begin() as connection:
            connection.execute(insert(Task).values(task_row))
    except SQLAlchemyError as exc:
        logger.warning("task %s: could not record it aborted: %s", task_row["id"], exc)


def _callbacks(client: Client, options: TaskOptions, created: float) -> list[callbacks.Callback]:
    """The task's callback jobs, made now as a push would make them (through the client
    middleware, args aside; another runtime's job as its own client sends it): a job that
    cannot be one is refused before anything is written."""
    made: list[callbacks.Callback] = []
    args = list(options.callback_args or ())
    for kind, name in options.callbacks.items():
        spec = client.registry.get(name)
        what = f"on_{kind}: {spec.name}"
        if isinstance(spec, RuntimeJob):
            spec.check_args([{}, *args])
            head = {"class": spec.name, "queue": spec.options.queue, "jid": payload.new_jid()}
            made.append(callbacks.Callback(kind, spec.name, head, args, spec.runtime))
            continue
        if spec.options.flow.active:
            raise ValueError(
                f"{what} has a concurrency key, rate limit or unique key: a callback is pushed as its "
                "task ends, and nothing may hold it back"
            )
        # The summary comes first: a dict stands for it.
        spec.check_args([{}, *args])
        job = _through_middleware(
            client,
            {**spec.options.payload_head(), "args": args, "class": spec.name}
            | {"jid": payload.new_jid(), "created_at": created},
        )
        made.append(callbacks.Callback(kind, spec.name, {k: v for k, v in job.items() if k != "args"}, args))
    return made


def _through_middleware(client: Client, item: payload.JobDict) -> payload.JobDict:
    pushed = client.middleware.invoke(item, item["queue"], final=lambda: item)
    if pushed is None:
        raise ValueError("a client middleware dropped a job of the task; nothing was enqueued")
    return pushed


def _set_state(engine: Engine, client: Client, task_id: str, state: TaskState) -> None:
    """Mark the task ``state``. An aborted task has ended: the tasks that wait for it, linked
    while it was being created, follow as after any end."""
    try:
        with writer(engine).begin() as connection:
            changed = connection.execute(
                update(Task)
                .where(Task.id == task_id, Task.state == TaskState.CREATING.value)
                .values(state=state.value)
                .returning(Task.children)
            ).first()
            settled = parents.Settled([], [])
            if state == TaskState.ABORTED and changed is not None and changed.children:
                settled = parents.settle(connection, [task_id])
            due = callbacks.fire(connection, settled.ended)
    except SQLAlchemyError as exc:
        # The jobs' fate is settled either way (all pushed, or none): the task reads "creating"
        # until the first of its jobs starts (which turns it ready), as the read model says.
        # Its children wait on: it is not known to have ended.
        logger.warning("task %s: could not mark it %s: %s", task_id, state.value, exc)
        return
    for child_id in settled.holds:
        _follow_up(engine, client, child_id, [], True)
    if due:
        _follow_up(engine, client, task_id, due, False)
