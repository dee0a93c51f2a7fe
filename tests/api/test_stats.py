"""Stats: counters, sizes, latency, queues, history; constant round trips; namespaces."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import redis

import asynctask.client
from asynctask import Client, Settings, payload
from asynctask.api import Queue, Stats
from asynctask.keys import Keys
from tests.api.conftest import sidekiq_job
from tests.api.stores import Store, write_process
from tests.conftest import REDIS_URL


class CountingConnection(redis.Connection):
    """A real connection that counts what it sends: one send is one round trip (a pipeline is one send)."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]  # untyped upstream


@pytest.fixture
def counting() -> Iterator[redis.Redis]:
    client = redis.Redis(
        connection_pool=redis.ConnectionPool.from_url(REDIS_URL, connection_class=CountingConnection)
    )
    client.ping()  # the connection handshake is not part of what is measured
    yield client
    client.close()


def test_stats_reads_every_number(store: Store) -> None:
    store.set_stat("processed", 1234)
    store.set_stat("failed", 56)
    # The oldest job of "default" was enqueued 30 s ago.
    store.push(sidekiq_job(enqueued_at=payload.now() - 30))
    store.push(sidekiq_job(args=[1]))
    store.push(sidekiq_job(args=[2], queue="critical"), "critical")
    store.push(sidekiq_job(args=[3], queue="critical"), "critical")
    store.add("schedule", sidekiq_job(args=[4]), payload.now() + 3600)
    store.add("retry", sidekiq_job(), payload.now() + 20)
    for n in range(2):
        store.add("dead", sidekiq_job(args=[n]), payload.now())
    for n in range(3):
        store.add("stopped", sidekiq_job(args=[n], cursor=n), payload.now())
    store.process("vm:1:aaaaaaaaaaaa", busy=2)
    store.process("vm:2:bbbbbbbbbbbb", busy=3)
    store.process("vm:3:deaddeaddead", busy=4, alive=False)

    stats = Stats(settings=store.settings)

    assert (stats.processed, stats.failed) == (1234, 56)
    assert (stats.scheduled_size, stats.retry_size, stats.dead_size, stats.stopped_size) == (1, 1, 2, 3)
    assert stats.queues == {"critical": 2, "default": 2}
    assert stats.enqueued == 4
    assert stats.processes_size == 2
    assert stats.workers_size == 5
    assert 29 < stats.default_queue_latency < 40


def test_stats_of_an_empty_store(store: Store) -> None:
    stats = Stats(settings=store.settings)
    assert (stats.processed, stats.failed, stats.enqueued) == (0, 0, 0)
    assert (stats.processes_size, stats.workers_size) == (0, 0)
    assert stats.queues == {}
    assert stats.default_queue_latency == 0.0


def test_stats_is_a_snapshot_until_refreshed(store: Store) -> None:
    stats = Stats(settings=store.settings)
    assert stats.enqueued == 0
    store.push(sidekiq_job())
    assert stats.enqueued == 0
    assert stats.refresh().enqueued == 1


def test_stats_round_trips_do_not_grow_with_queues(
    counting: redis.Redis, redis_settings: Settings, redis_client: Client
) -> None:
    keys = Keys(redis_settings.namespace)

    def round_trips() -> int:
        CountingConnection.sends = 0
        stats = Stats(counting, keys)
        assert stats.processed == 0
        assert stats.enqueued == len(stats.queues)
        return CountingConnection.sends

    redis_client.push({"class": "HardJob", "args": []})
    write_process(counting, keys, "vm:1:aaaaaaaaaaaa")
    few = round_trips()
    for n in range(40):
        redis_client.push({"class": "HardJob", "args": [], "queue": f"q{n}"})
        write_process(counting, keys, f"vm:{n + 10}:aaaaaaaaaaaa")
    assert round_trips() == few == 2


def test_default_queue_latency_reads_sidekiq8_milliseconds(store: Store) -> None:
    ms = int((payload.now() - 10) * 1000)
    store.push(sidekiq_job(created_at=ms, enqueued_at=ms))
    assert 9 < Stats(settings=store.settings).default_queue_latency < 20


def test_default_queue_latency_ignores_an_unreadable_tail(
    conn: redis.Redis, redis_settings: Settings
) -> None:
    conn.lpush(Keys(redis_settings.namespace).queue("default"), b"\xff not json")
    assert Stats(conn, settings=redis_settings).default_queue_latency == 0.0


def test_history_reads_daily_counts_newest_first(store: Store) -> None:
    today = datetime.now(UTC)
    store.set_stat(f"processed:{today:%Y-%m-%d}", 7)
    store.set_stat(f"failed:{today:%Y-%m-%d}", 2)
    store.set_stat(f"processed:{today - timedelta(days=2):%Y-%m-%d}", 40)

    history = Stats(settings=store.settings).history(3)

    assert list(history.processed) == [today.date() - timedelta(days=n) for n in range(3)]
    assert list(history.processed.values()) == [7, 0, 40]
    assert list(history.failed.values()) == [2, 0, 0]


def test_history_from_a_given_day(store: Store) -> None:
    day = date(2026, 1, 1)
    store.set_stat("processed:2025-12-31", 5)
    history = Stats(settings=store.settings).history(2, start=day)
    assert history.processed == {date(2026, 1, 1): 0, date(2025, 12, 31): 5}
    with pytest.raises(ValueError):
        Stats(settings=store.settings).history(0)


def test_reset_zeroes_the_lifetime_counters(store: Store) -> None:
    store.set_stat("processed", 10)
    store.set_stat("failed", 3)
    stats = Stats(settings=store.settings)
    stats.reset("failed")
    assert (stats.processed, stats.failed) == (10, 0)
    stats.reset()
    assert (stats.processed, stats.failed) == (0, 0)
    with pytest.raises(ValueError):
        stats.reset("enqueued")


def test_namespaces_are_kept_apart(conn: redis.Redis, redis_settings: Settings, redis_client: Client) -> None:
    redis_client.push({"class": "HardJob", "args": []})
    assert conn.exists(f"{redis_settings.namespace}:queue:default")
    assert conn.sismember(
        f"{redis_settings.namespace}:queues", "default"
    )  # names inside keys are not prefixed
    other = Keys(f"attest-{uuid.uuid4().hex[:12]}")
    try:
        conn.lpush(other.queue("elsewhere"), payload.dumps(sidekiq_job(queue="elsewhere")))
        conn.sadd(other.queues, "elsewhere")
        assert Stats(conn, settings=redis_settings).queues == {"default": 1}
        assert Stats(conn, other).queues == {"elsewhere": 1}
        assert [q.name for q in Queue.all(conn, other)] == ["elsewhere"]
    finally:
        conn.delete(other.queue("elsewhere"), other.queues)


def test_without_arguments_the_default_client_is_used(
    store: Store, store_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asynctask.client, "_default", store_client)
    store_client.push({"class": "HardJob", "args": []})
    assert Stats().queues == {"default": 1}
    assert Queue().size == 1
