"""The worker runtime in-process: running, retrying, burying, scheduling, queues, middleware."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import redis

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.api import Stats
from asynctask.middleware import Chain
from asynctask.payload import decompress_backtrace
from asynctask.settings import QueueSpec
from asynctask.worker import Worker
from asynctask.worker import retry as retry_module
from tests.conftest import marked_queues, wait_for_beats, wait_until

StartWorker = Callable[..., Worker]


def dead_entries(conn: redis.Redis, client: Client) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in conn.zrange(client.keys.dead, 0, -1)]


def retry_entries(conn: redis.Redis, client: Client) -> list[tuple[dict[str, Any], float]]:
    return [(json.loads(raw), score) for raw, score in conn.zrange(client.keys.retry, 0, -1, withscores=True)]


def test_jobs_run_with_their_args_and_context(
    registry: Registry, redis_client: Client, start_redis_worker: StartWorker
) -> None:
    seen: list[tuple[Any, ...]] = []

    @asynctask.job(registry=registry)
    def add(a: int, b: dict[str, str]) -> None:
        ctx = asynctask.current_job()
        seen.append((a, b, ctx.jid, ctx.queue, ctx.retry_count))

    jid = add.set(client=redis_client).perform_async(1, {"ü": "ß"})
    start_redis_worker()
    wait_until(lambda: seen)
    assert seen == [(1, {"ü": "ß"}, jid, "default", None)]
    with pytest.raises(RuntimeError, match="only available inside a running job"):
        asynctask.current_job()


def test_a_failure_goes_to_the_retry_set_with_sidekiq_fields(
    registry: Registry, redis_client: Client, conn: redis.Redis, start_redis_worker: StartWorker
) -> None:
    @asynctask.job(registry=registry, backtrace=True)
    def flaky(n: int) -> None:
        raise ValueError(f"bad input {n}")

    jid = flaky.set(client=redis_client).perform_async(7)
    start = time.time()
    start_redis_worker()
    [(job, score)] = wait_until(lambda: retry_entries(conn, redis_client))
    assert job["jid"] == jid
    assert (job["error_message"], job["error_class"], job["retry_count"]) == ("bad input 7", "ValueError", 0)
    assert start <= job["failed_at"] <= time.time()
    assert "retried_at" not in job
    assert 15 <= score - job["failed_at"] <= 15 + 9 + 1
    assert any("in `flaky'" in line for line in decompress_backtrace(job["error_backtrace"]))
    assert conn.llen(redis_client.keys.queue("default")) == 0


def test_retries_count_up_then_the_job_dies_and_the_hook_runs(
    registry: Registry,
    redis_client: Client,
    conn: redis.Redis,
    start_redis_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exhausted: list[tuple[str, str]] = []
    # The largest jitter: with none (one draw in ten), a retry would be due at once and could
    # run before the test sees its count.
    monkeypatch.setattr(retry_module, "random", SimpleNamespace(randrange=lambda stop: stop - 1))

    @asynctask.job(registry=registry, retry=2)
    def always_fails() -> None:
        raise RuntimeError("nope")

    @always_fails.retry_in
    def immediately(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        return 0.01

    @always_fails.on_retries_exhausted
    def note(job: dict[str, Any], exc: BaseException) -> None:
        exhausted.append((job["jid"], str(exc)))

    jid = always_fails.set(client=redis_client).perform_async()
    start_redis_worker()
    # retry_in adds Sidekiq's jitter (up to 9 * (count + 1) s), so move due retries by hand.
    for expected_count in (0, 1):

        def has_count(n: int = expected_count) -> list[dict[str, Any]]:
            return [j for j, _ in retry_entries(conn, redis_client) if j["retry_count"] == n]

        wait_until(has_count)
        [raw] = conn.zrange(redis_client.keys.retry, 0, -1)
        conn.zadd(redis_client.keys.retry, {raw: 0}, xx=True)
    [dead] = wait_until(lambda: dead_entries(conn, redis_client))
    assert dead["jid"] == jid and dead["retry_count"] == 2 and "retried_at" in dead
    assert exhausted == [(jid, "nope")]


def test_retry_queue_moves_retries_elsewhere(
    registry: Registry, redis_client: Client, conn: redis.Redis, start_redis_worker: StartWorker
) -> None:
    @asynctask.job(registry=registry, retry_queue="slow")
    def fails() -> None:
        raise ValueError("x")

    fails.set(client=redis_client).perform_async()
    start_redis_worker()
    [(job, _)] = wait_until(lambda: retry_entries(conn, redis_client))
    assert job["queue"] == "slow"


def test_scheduled_and_due_retry_jobs_are_run_by_the_poller(
    registry: Registry, redis_client: Client, conn: redis.Redis, start_redis_worker: StartWorker
) -> None:
    ran: list[tuple[int, Any]] = []

    @asynctask.job(registry=registry)
    def later(n: int) -> None:
        ran.append((n, asynctask.current_job().job.get("enqueued_at")))

    before = time.time()
    later.set(client=redis_client).perform_in(0.5, 1)
    retried = {"retry": True, "queue": "default", "class": "later", "args": [2], "jid": "a" * 24}
    retried |= {"created_at": before, "enqueued_at": before, "retry_count": 0, "error_message": "x"}
    conn.zadd(redis_client.keys.retry, {json.dumps(retried): before - 1})
    start_redis_worker()
    wait_until(lambda: len(ran) == 2, timeout=10)
    assert sorted(n for n, _ in ran) == [1, 2]
    # Re-pushed with a fresh enqueued_at, as Sidekiq's poller does.
    assert all(enqueued > before for _, enqueued in ran)
    assert conn.zcard(redis_client.keys.schedule) == 0 and conn.zcard(redis_client.keys.retry) == 0


def test_strict_queues_drain_in_order(
    registry: Registry, redis_client: Client, conn: redis.Redis, start_redis_worker: StartWorker
) -> None:
    order = marked_queues(registry, redis_client, {"low": 30, "high": 30})
    start_redis_worker(queues=(QueueSpec("high"), QueueSpec("low")), concurrency=1)
    wait_until(lambda: len(order) == 60)
    assert order == ["high"] * 30 + ["low"] * 30


def test_a_broken_middleware_does_not_lose_the_job(
    registry: Registry, redis_client: Client, conn: redis.Redis, start_redis_worker: StartWorker
) -> None:
    @asynctask.job(registry=registry)
    def fine() -> None: ...

    def broken(definition: Any, job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> None:
        raise ConnectionError("tracking database is down")

    jid = fine.set(client=redis_client).perform_async()
    start_redis_worker(server_middleware=Chain([broken]))
    [(job, _)] = wait_until(lambda: retry_entries(conn, redis_client))
    assert (job["jid"], job["error_class"]) == (jid, "ConnectionError")


def test_heartbeat_writes_the_process_record_sidekiq_reads(
    registry: Registry,
    redis_client: Client,
    conn: redis.Redis,
    start_redis_worker: StartWorker,
    redis_settings: Settings,
) -> None:
    release = threading.Event()

    @asynctask.job(registry=registry)
    def slow() -> None:
        release.wait(10)

    slow.set(client=redis_client).perform_async()
    worker = start_redis_worker(tag="api", labels=("blue",))
    identity = worker.identity
    keys = redis_client.keys
    assert conn.sismember(keys.processes, identity)

    def busy_recorded() -> dict[bytes, bytes]:
        record = conn.hgetall(keys.process(identity))
        return record if record.get(b"busy") == b"1" else {}

    record = wait_until(busy_recorded)
    info = json.loads(record[b"info"])
    hostname, pid, _ = identity.split(":")
    assert info["identity"] == identity and info["hostname"] == hostname and info["pid"] == int(pid)
    assert (info["concurrency"], info["queues"], info["tag"], info["labels"]) == (
        4,
        ["default"],
        "api",
        ["blue"],
    )
    assert isinstance(info["started_at"], float)
    assert record[b"quiet"] == b"false"
    assert float(record[b"beat"]) > time.time() - 5
    assert int(record[b"rss"]) > 1000 and int(record[b"rtt_us"]) > 0
    assert 0 < conn.ttl(keys.process(identity)) <= redis_settings.process_ttl
    for work_key in (keys.workers(identity), keys.work(identity)):
        [work] = [json.loads(v) for v in conn.hvals(work_key)]
        assert work["queue"] == "default" and json.loads(work["payload"])["class"] == "slow"
        assert abs(work["run_at"] - time.time()) < 10 and isinstance(work["run_at"], int)
    release.set()
    wait_until(lambda: conn.get(keys.stat_processed) == b"1")
    assert conn.get(keys.stat_processed_day()) == b"1"
    assert conn.ttl(keys.stat_processed_day()) > 4 * 365 * 24 * 3600


def test_remote_signals_quiet_and_stop_the_worker(
    registry: Registry, redis_client: Client, conn: redis.Redis, start_redis_worker: StartWorker
) -> None:
    ran: list[int] = []

    @asynctask.job(registry=registry)
    def work(n: int) -> None:
        ran.append(n)

    worker = start_redis_worker()
    keys = redis_client.keys
    conn.lpush(keys.signals(worker.identity), "TSTP")
    wait_until(lambda: conn.hget(keys.process(worker.identity), "quiet") == b"true")
    work.set(client=redis_client).perform_async(1)
    wait_for_beats(lambda: float(conn.hget(keys.process(worker.identity), "beat") or 0))
    assert ran == [] and conn.llen(keys.queue("default")) == 1
    conn.lpush(keys.signals(worker.identity), "TERM")
    wait_until(lambda: not conn.sismember(keys.processes, worker.identity))
    assert conn.hlen(keys.inflight_registry) == 0


def test_a_signal_that_comes_again_is_logged_once(
    start_redis_worker: StartWorker, caplog: pytest.LogCaptureFixture
) -> None:
    worker = start_redis_worker()
    with caplog.at_level(logging.WARNING, logger="asynctask.worker"):
        for name in ("TSTP", "TSTP", "TERM", "TERM", "INT"):
            worker.handle_signal(name)
    said = [record.getMessage() for record in caplog.records if record.name == "asynctask.worker"]
    assert said == ["TSTP: going quiet", "TERM: shutting down"]


@pytest.mark.alone
def test_shutdown_interrupts_a_job_past_the_timeout_and_requeues_it(
    registry: Registry, redis_client: Client, conn: redis.Redis, start_redis_worker: StartWorker
) -> None:
    interrupted: list[str] = []

    @asynctask.job(registry=registry)
    def long_job() -> None:
        try:
            while True:
                time.sleep(0.01)
        except asynctask.Shutdown:
            interrupted.append(asynctask.current_job().jid)
            raise

    jid = long_job.set(client=redis_client).perform_async()
    worker = start_redis_worker(timeout=0.5)
    wait_until(lambda: worker.manager.busy == 1)
    [original] = conn.lrange(redis_client.keys.inflight(worker.identity, "default"), 0, -1)
    started = time.monotonic()
    worker.stop()
    wait_until(lambda: conn.llen(redis_client.keys.queue("default")) == 1, timeout=6)
    assert time.monotonic() - started < 0.5 + 3
    assert conn.lrange(redis_client.keys.queue("default"), 0, -1) == [original]
    assert interrupted == [jid]
    assert conn.exists(redis_client.keys.inflight(worker.identity, "default")) == 0


def test_a_job_interrupted_at_shutdown_counts_as_processed_and_failed(
    registry: Registry,
    redis_client: Client,
    redis_settings: Settings,
    start_redis_worker: Callable[..., Worker],
) -> None:
    started, release = threading.Event(), threading.Event()

    @asynctask.job(registry=registry)
    def stuck() -> None:
        started.set()
        # A wait no exception interrupts: the thread is still in it when the worker leaves.
        release.wait(30)

    stuck.set(client=redis_client).perform_async()
    worker = start_redis_worker(timeout=0.2)
    assert started.wait(10)
    try:
        worker.stop()
        wait_until(lambda: worker._stopped.is_set(), timeout=15)
        stats = Stats(settings=redis_settings)
        # As Sidekiq counts a job its shutdown interrupted.
        assert (stats.processed, stats.failed) == (1, 1)
    finally:
        release.set()
    # The thread unwinding afterwards counts nothing more.
    wait_until(lambda: all(not p.thread.is_alive() for p in worker.manager._processors), timeout=10)
    assert worker.stats.take() == (0, 0)
