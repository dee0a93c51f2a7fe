"""A worker process's buffer of claimed jobs: jobs claimed for threads waiting in the process
(the SQL broker's) reach them at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from asynctask import Client, Settings, default_registry, payload
from asynctask.brokers import Fetcher, UnitOfWork
from asynctask.brokers.sql import SqlBroker
from asynctask.brokers.sql.push import push_rows
from asynctask.middleware import Chain, TrackingClientMiddleware
from tests.brokers.conftest import MakeClient
from tests.conftest import wait_until
from tests.jobs.flow_jobs import plain_step


@pytest.fixture
def client(make_client: MakeClient) -> Client:
    # Waits long enough that no waiting thread gives up before the test hands it a job.
    return make_client(
        middleware=Chain([TrackingClientMiddleware()]), registry=default_registry, fetch_timeout=5.0
    )


@pytest.fixture
def fetcher(client: Client) -> Iterator[Fetcher]:
    fetch = client.broker.fetcher("test-buffer")
    fetch.register()
    yield fetch
    fetch.interrupt()


def _store_quietly(broker: SqlBroker, count: int, max_payload_bytes: int) -> None:
    """Store plain jobs without waking anyone (a push would wake the thread watching for jobs,
    which would then claim them itself)."""
    jobs = [
        {
            "class": plain_step.name,
            "args": ["p", n, 0],
            "jid": jid,
            "queue": "default",
            "created_at": time.time(),
        }
        for n, jid in enumerate(payload.new_jids(count))
    ]
    with broker.store.write() as tx:
        broker.store.insert_jobs(tx.connection, push_rows([(job, None) for job in jobs], max_payload_bytes))


@pytest.mark.alone
def test_jobs_claimed_for_waiting_threads_wake_them(
    client: Client, fetcher: Fetcher, settings: Settings
) -> None:
    if settings.uses_redis:
        pytest.skip("a Redis worker's threads wait in Redis itself (BLMOVE), not on the buffer")
    broker = client.broker
    assert isinstance(broker, SqlBroker)
    _store_quietly(broker, 1, settings.max_payload_bytes)
    running = fetcher.fetch(None, 0)
    assert running is not None
    handed: list[tuple[float, UnitOfWork]] = []

    def take(ack: UnitOfWork | None) -> None:
        unit = fetcher.fetch(ack, 0)
        if unit is not None:
            handed.append((time.monotonic(), unit))

    waiting = [threading.Thread(target=take, args=(None,), daemon=True) for _ in range(3)]
    for thread in waiting:
        thread.start()
    wait_until(lambda: fetcher._waiting == 3, 5)
    # Once the watching thread polls least often (SQLite: 5 times a second), jobs come that
    # it is not told of: the running job's end claims them, for the waiting threads too.
    time.sleep(1)
    _store_quietly(broker, 3, settings.max_payload_bytes)
    ended = time.monotonic()
    ending = threading.Thread(target=take, args=(running,), daemon=True)
    ending.start()
    wait_until(lambda: len(handed) == 3, 10)
    fetcher.interrupt()
    for thread in [*waiting, ending]:
        thread.join(10)
    assert max(at for at, _ in handed) - ended < 0.15, "claimed jobs waited in the buffer"
