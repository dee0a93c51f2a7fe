"""The store refusing writes while a failed job is being settled: the processor thread logs
it and lives on, the job stays claimed while the store refuses, and once the store is back
the claim no thread holds any more is given back and the job runs again.

Runs on a private redis-server (its memory limit is what the test changes), never the
shared one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.keys import Keys
from asynctask.middleware import Chain
from asynctask.worker import Worker
from asynctask.worker.manager import Manager
from tests.conftest import fast_settings, scratch_redis, wait_until


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[redis.Redis]:
    with scratch_redis(tmp_path) as conn:
        yield conn


@pytest.fixture
def redis_settings(private_redis: redis.Redis) -> Settings:
    """The worker's settings (``start_redis_worker`` uses them): the private server, no tracking."""
    port = private_redis.connection_pool.connection_kwargs["port"]
    return fast_settings(
        redis_url=f"redis://127.0.0.1:{port}/0", namespace="outage", concurrency=2, tracking=False
    )


def test_a_store_failure_while_settling_a_job_leaves_it_claimed_and_the_thread_alive(
    redis_settings: Settings,
    registry: Registry,
    private_redis: redis.Redis,
    start_redis_worker: Callable[..., Worker],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    deaths: list[BaseException] = []
    died = Manager.processor_died

    def processor_died(manager: Manager, processor: Any, exc: BaseException) -> None:
        deaths.append(exc)
        died(manager, processor, exc)

    monkeypatch.setattr(Manager, "processor_died", processor_died)
    ran: list[str] = []

    @asynctask.job(registry=registry)
    def fills_the_store() -> None:
        ran.append("fills_the_store")
        if ran.count("fills_the_store") == 1:
            # From here on the server refuses every write: the retry cannot be stored.
            private_redis.config_set("maxmemory", "1")
            raise RuntimeError("failed while the store was full")

    @asynctask.job(registry=registry)
    def fine() -> None:
        ran.append("fine")

    client = Client(redis_settings, registry=registry, middleware=Chain())
    jid = fills_the_store.set(client=client).perform_async()
    worker = start_redis_worker()
    threads = {p.thread for p in worker.manager._processors}
    keys = Keys(redis_settings.namespace)
    wait_until(lambda: ran == ["fills_the_store"])
    # The store must stay full until the worker has tried to store the retry: restored before,
    # the retry would be stored and the job would wait out its backoff instead.
    wait_until(lambda: any("could not settle a job" in r.getMessage() for r in caplog.records))

    def claimed() -> list[bytes]:
        lists = private_redis.hkeys(keys.inflight_registry)
        return [raw for key in lists for raw in private_redis.lrange(key, 0, -1)]

    # The failure could not be recorded: the job is still claimed by the worker, not retried.
    [held] = wait_until(claimed)
    assert jid.encode() in held
    assert private_redis.zcard(keys.retry) == 0
    private_redis.config_set("maxmemory", "0")
    fine.set(client=client).perform_async()
    wait_until(lambda: "fine" in ran, timeout=15)
    # The claim no thread holds goes back to its queue (two heartbeats) and runs again.
    wait_until(lambda: ran.count("fills_the_store") == 2, timeout=15)
    wait_until(lambda: not claimed())
    assert deaths == []
    assert {p.thread for p in worker.manager._processors} == threads
    assert all(thread.is_alive() for thread in threads)
    client.broker.close()
