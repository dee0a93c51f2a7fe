"""A flusher pushes the callbacks its batch made due as soon as the batch committed, and a
flusher's first look pushes those another left due."""

from __future__ import annotations

import redis
from sqlalchemy import Engine, update

from asynctask import Registry, Tracking, job
from asynctask.brokers.redis.flusher import Flusher
from asynctask.db.engine import writer
from asynctask.tracking import callbacks
from asynctask.tracking.models import TaskCallback
from asynctask.tracking.outbox import pack
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import status


def _ended_by_stream(tracking: Tracking, registry: Registry, conn: redis.Redis) -> str:
    """A task of two jobs with an on_complete callback, both jobs' ends waiting in the stream
    (its queue emptied: the stream stands for the worker that ran them); the task's id."""

    @job(registry=registry)
    def step(items: list[int]) -> None: ...

    @job(registry=registry)
    def report(summary: dict[str, object]) -> None: ...

    task = tracking.create_task(step, range(2), on_complete=report)
    jids = [e.job_id for e in tracking.list_events(task.id).items]
    ends = [status(jid, kind).encode() for jid in jids for kind in (EventStatus.WORKING, EventStatus.FINISH)]
    keys = tracking.client.keys
    conn.xadd(keys.tracking_stream, {"s": 1, "d": pack(ends)})
    conn.delete(keys.queue("default"))
    return task.id


def test_the_batch_that_ends_a_task_pushes_its_callback_once_committed(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, conn: redis.Redis
) -> None:
    task_id = _ended_by_stream(redis_tracking, registry, conn)
    keys = redis_tracking.client.keys
    flusher = Flusher(conn, keys, writer(database_engine), "test-flusher")
    # The first read looks for callbacks left due before it reads the stream: there are none yet.
    assert flusher.flush() == 1
    [pushed] = conn.lrange(keys.queue("default"), 0, -1)
    assert b'"class":"report"' in pushed and task_id.encode() in pushed
    assert [c.state for c in redis_tracking.get_task(task_id).callbacks] == ["pushed"]


def test_a_flusher_pushes_the_callbacks_another_left_due_when_it_starts(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, conn: redis.Redis
) -> None:
    task_id = _ended_by_stream(redis_tracking, registry, conn)
    keys = redis_tracking.client.keys
    Flusher(conn, keys, writer(database_engine), "first").flush()
    # As if the first had died between its push and its mark, and its push had been lost too.
    conn.delete(
        keys.queue("default"), keys.callback_pushed(redis_tracking.get_task(task_id).callbacks[0].jid)
    )
    with database_engine.begin() as connection:
        connection.execute(update(TaskCallback).values(state=callbacks.DUE))
    assert Flusher(conn, keys, writer(database_engine), "second").flush() == 0
    assert conn.llen(keys.queue("default")) == 1
    assert [c.state for c in redis_tracking.get_task(task_id).callbacks] == ["pushed"]
