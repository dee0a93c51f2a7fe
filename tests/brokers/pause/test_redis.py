"""Paused queues in Redis's fetch: the claim script skips a paused queue whole (its list, its
urgent list and its shares), a thread blocked in BLMOVE on a queue paused meanwhile hands the
job back to the queue's tail, and idle threads block on no paused queue."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from asynctask import Settings
from asynctask.api import Queue
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.redis.fetch import PAUSED_BLOCK, ReliableFetch
from asynctask.settings import QueueSpec
from tests.brokers.fair_share.test_redis import job, publish
from tests.conftest import wait_until


@pytest.fixture
def redis_broker(redis_settings: Settings) -> Iterator[RedisBroker]:
    # A fetch timeout far above PAUSED_BLOCK, so that waits that end early show it.
    made = RedisBroker(
        replace(redis_settings, queues=(QueueSpec("default"), QueueSpec("other")), fetch_timeout=5.0)
    )
    yield made
    made.close()


@pytest.fixture
def fetch(redis_broker: RedisBroker) -> ReliableFetch:
    fetch = redis_broker.fetcher("proc-1")
    fetch.register()
    return fetch


def push(broker: RedisBroker, queue: str, *jids: str) -> None:
    broker.push([(job(jid, queue), None) for jid in jids])


def claimed(units: list[UnitOfWork]) -> list[str]:
    return [json.loads(unit.payload)["jid"] for unit in units]


def test_the_claim_skips_a_paused_queue_with_its_shares_and_urgent_list(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings
) -> None:
    publish(redis_broker, "t1", ["s1", "s2"], "tenant:a")
    redis_broker.redis.lpush(redis_broker.keys.urgent("default"), json.dumps(job("u1")))
    push(redis_broker, "default", "p1")
    push(redis_broker, "other", "o1")
    default = Queue("default", redis_broker.redis, redis_broker.keys, settings=redis_settings)
    default.pause()

    assert claimed(fetch.claim(10, [], [])) == ["o1"]
    assert fetch.claim(10, [], []) == []
    assert default.size == 4
    assert redis_broker.redis.llen(redis_broker.keys.inflight("proc-1", "default")) == 0

    default.resume()

    assert sorted(claimed(fetch.claim(10, [], []))) == ["p1", "s1", "s2", "u1"]


def test_a_job_taken_by_a_thread_blocked_on_a_queue_paused_meanwhile_goes_back_to_its_tail(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings
) -> None:
    assert fetch.claim(1, [], []) == []
    returned: list[UnitOfWork | None] = []
    # Target 0: BLMOVE on queue:default (the fetcher does not know it is paused).
    blocked = threading.Thread(target=lambda: returned.append(fetch.wait(0)))
    blocked.start()
    wait_until(lambda: any(c.get("cmd") == "blmove" for c in redis_broker.redis.client_list()))
    Queue("default", redis_broker.redis, redis_broker.keys, settings=redis_settings).pause()

    push(redis_broker, "default", "older", "newer")
    blocked.join(10)

    assert returned == [None]
    # The oldest job was taken, then put back where the next fetch takes it first.
    queued = [
        json.loads(raw)["jid"] for raw in redis_broker.redis.lrange(redis_broker.keys.queue("default"), 0, -1)
    ]
    assert queued == ["newer", "older"]
    assert redis_broker.redis.llen(redis_broker.keys.inflight("proc-1", "default")) == 0


def test_idle_threads_block_on_no_paused_queue_and_look_again_within_a_second(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings
) -> None:
    push(redis_broker, "default", "d1")
    default = Queue("default", redis_broker.redis, redis_broker.keys, settings=redis_settings)
    default.pause()
    assert fetch.claim(1, [], []) == []

    # Every target but "other" is paused: each wait blocks there, for PAUSED_BLOCK at most.
    for block_on in range(4):
        started = time.monotonic()
        assert fetch.wait(block_on) is None
        assert time.monotonic() - started < PAUSED_BLOCK + 0.5
    Queue("other", redis_broker.redis, redis_broker.keys, settings=redis_settings).pause()
    assert fetch.claim(1, [], []) == []
    # Every queue paused: no BLMOVE at all, the paused queue's job stays where it is.
    started = time.monotonic()
    assert fetch.wait(0) is None
    assert PAUSED_BLOCK - 0.1 < time.monotonic() - started < PAUSED_BLOCK + 0.5
    assert default.size == 1

    default.resume()
    assert claimed(fetch.claim(1, [], [])) == ["d1"]
