"""A tracked job with a concurrency key says which key it waits for, once, with its push: not
again when a poller moves it, and not for a job without a key."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import select

from asynctask import QueueSpec, Registry, Tracking, job
from asynctask.tracking.models import Event, EventMessage
from asynctask.worker import Worker
from tests.conftest import wait_until


def log_of(tracking: Tracking, jid: str) -> tuple[str | None, list[tuple[str, str]]]:
    """The event's status and its messages (status, text), oldest first."""
    with tracking.engine.connect() as connection:
        status = connection.execute(select(Event.status).where(Event.job_id == jid)).scalar()
        rows = connection.execute(
            select(EventMessage.status, EventMessage.text)
            .join(Event, Event.id == EventMessage.event_id)
            .where(Event.job_id == jid)
            .order_by(EventMessage.seq)
        ).all()
    return status, [(row.status, row.text) for row in rows]


def test_a_keyed_job_waits_for_its_key_once(
    redis_tracking: Tracking, registry: Registry, start_tracked_worker: Callable[..., Worker]
) -> None:
    @job(registry=registry, track=True, concurrency_key="device:{device}")
    def reboot(device: int) -> None:
        pass

    @job(registry=registry, track=True)
    def plain() -> None:
        pass

    now = reboot.set(client=redis_tracking.client).perform_async(7)
    later = reboot.set(client=redis_tracking.client).perform_in(0.5, 8)
    unkeyed = plain.set(client=redis_tracking.client).perform_async()
    start_tracked_worker()
    finished = wait_until(
        lambda: all(log_of(redis_tracking, jid)[0] == "finish" for jid in (now, later, unkeyed)), timeout=20
    )
    assert finished
    for jid, key in ((now, "device:7"), (later, "device:8")):
        messages = log_of(redis_tracking, jid)[1]
        assert messages == [("enqueue", f"waiting for {key}"), ("working", "started"), ("finish", "finished")]
    assert log_of(redis_tracking, unkeyed)[1] == [("working", "started"), ("finish", "finished")]


def test_the_message_is_recorded_with_the_push(
    redis_tracking: Tracking, registry: Registry, start_tracked_worker: Callable[..., Worker]
) -> None:
    @job(registry=registry, track=True, queue="elsewhere")
    def parked(n: int) -> None:
        pass

    jid = parked.set(
        client=redis_tracking.client, concurrency_key="line:{n}", concurrency_limit=2
    ).perform_async(3)
    # A worker on another queue: its flusher applies the enqueue, and nothing runs the job.
    start_tracked_worker(queues=(QueueSpec("default"),))
    # As long as the test above gives its worker: the flusher's start is slow on a loaded machine.
    assert wait_until(lambda: log_of(redis_tracking, jid)[1], timeout=20) == [
        ("enqueue", "waiting for line:3")
    ]
    time.sleep(0.5)
    assert log_of(redis_tracking, jid) == ("enqueue", [("enqueue", "waiting for line:3")])
