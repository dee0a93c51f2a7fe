"""Every background loop of a worker outlives an outage of its broker, in the same process.

The private Redis is killed while the worker runs, long enough for every loop to fail more
than once, then restarted. Afterwards each loop must work again (the heartbeat renews the
record, orphan recovery returns a dead process's claim, the poller moves a scheduled job, the
tracking sender delivers what was recorded during the outage, the processors run jobs), and
each must have logged the outage once when it started and once when it ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine, select

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.keys import Keys
from asynctask.middleware import Chain, TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.payload import dumps
from asynctask.tracking.models import Event, EventMessage
from asynctask.tracking.transitions import LOG, Transition
from asynctask.worker import Worker
from tests.chaos.redis_server import PrivateRedis
from tests.conftest import wait_until

#: Long enough for several heartbeats (0.5 s), polls (0.3 s) and fetch retries (1 s) to fail.
OUTAGE_SECONDS = 3.0
#: The loops that keep trying during the outage. Orphan recovery and the claim check follow a
#: heartbeat and are skipped while it fails; they are shown working afterwards.
LOOPS = ("heartbeat", "scheduled poll", "fetch", "tracking send")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'tracking.db'}"
    upgrade(url)
    created = create_database_engine(url)
    yield created
    created.dispose()


def messages(engine: Engine, jid: str) -> list[str]:
    with engine.connect() as connection:
        return list(
            connection.scalars(
                select(EventMessage.text)
                .join(Event, Event.id == EventMessage.event_id)
                .where(Event.job_id == jid)
            )
        )


@pytest.mark.slow
def test_every_background_loop_comes_back_after_a_broker_outage(
    redis_server: PrivateRedis, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        redis_url=redis_server.url,
        namespace="loops",
        database_url=str(engine.url),
        concurrency=3,
        heartbeat_interval=0.5,
        process_ttl=5,
        scheduled_poll_interval=0.3,
        fetch_timeout=0.5,
        flusher="thread",
    ).validated()
    registry = Registry()
    runs: list[str] = []

    @asynctask.job(registry=registry)
    def note(label: str) -> None:
        runs.append(label)

    worker = Worker(
        settings,
        registry=registry,
        server_middleware=Chain([TrackingServerMiddleware()]),
        client_middleware=Chain([TrackingClientMiddleware()]),
    )
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    client = Client(settings, registry=registry, middleware=Chain([TrackingClientMiddleware()]))
    conn = redis.Redis.from_url(redis_server.url)
    try:
        before = note.set(client=client, track=True).perform_async("before")
        # Its event is in SQL: what is recorded for it later has a row to land on.
        wait_until(lambda: messages(engine, before), timeout=10)
        with caplog.at_level(logging.DEBUG, logger="asynctask"):
            redis_server.kill()
            assert worker.tracker is not None
            worker.tracker.record(Transition(before, LOG, time.time(), "recorded during the outage"))
            time.sleep(OUTAGE_SECONDS)
            redis_server.start()
            note.set(client=client).perform_async("after")
            note.set(client=client).perform_in(0.5, "scheduled")
            dead = "dead-host:1:0123456789ab"
            orphan_list = client.keys.inflight(dead, "default")
            orphan = dumps(
                {"class": note.name, "args": ["orphan"], "jid": "orphan0000000000", "queue": "default"}
            )
            conn.rpush(orphan_list, orphan)
            conn.hset(client.keys.inflight_registry, orphan_list, dead)
            wait_until(lambda: {"after", "scheduled", "orphan"} <= set(runs), timeout=20)
            wait_until(lambda: "recorded during the outage" in messages(engine, before), timeout=20)
            wait_until(lambda: conn.exists(client.keys.process(worker.identity)), timeout=5)
            wait_until(lambda: all(f"{loop} recovered" in logged(caplog) for loop in LOOPS), timeout=10)
        for loop in LOOPS:
            # One line when the outage started, whatever the number of failed attempts.
            assert logged(caplog).count(f"{loop} failed") == 1, (loop, logged(caplog))
        assert worker._beat_thread.is_alive() and worker.poller.thread.is_alive()
        assert worker.tracker._sender.is_alive()
        assert len(worker.manager._processors) == settings.concurrency
        assert all(p.thread.is_alive() for p in worker.manager._processors)
    finally:
        worker.stop()
        thread.join(30)
        client.broker.close()
        conn.close()


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Each record's message up to "failed"/"recovered", so that the error text is left out."""
    out = []
    for record in caplog.records:
        message = record.getMessage()
        for word in (" failed", " recovered"):
            if word in message and not message.startswith(tuple(f"{loop} failed again" for loop in LOOPS)):
                out.append(message[: message.index(word) + len(word)])
                break
    return out


@pytest.mark.slow
def test_a_worker_stops_cleanly_while_its_broker_is_down(
    redis_server: PrivateRedis, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        redis_url=redis_server.url,
        namespace="stop",
        concurrency=2,
        timeout=1.0,
        heartbeat_interval=0.5,
        process_ttl=5,
        fetch_timeout=0.5,
        tracking=False,
    ).validated()
    worker = Worker(settings, registry=Registry(), server_middleware=Chain(), client_middleware=Chain())
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
    thread.start()
    conn = redis.Redis.from_url(redis_server.url)
    keys = Keys(settings.namespace)
    try:
        # Started: its heartbeat written, its claims registered and the data-loss token read,
        # then its threads started. Killed before that, it would stop as a worker that never
        # reached its broker, with nothing to push back.
        wait_until(
            lambda: (
                conn.exists(keys.process(worker.identity))
                and worker.identity.encode() in conn.hvals(keys.inflight_registry)
                and worker._started
            ),
            timeout=10,
        )
    finally:
        conn.close()
    redis_server.kill()
    with caplog.at_level(logging.ERROR, logger="asynctask"):
        worker.stop()
        thread.join(30)
    # An exception escaping run() would fail the test (pytest turns it into an error).
    assert not thread.is_alive()
    assert any("could not push unfinished jobs back" in r.getMessage() for r in caplog.records)
