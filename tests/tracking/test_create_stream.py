"""create_task reads its items as a stream, on SQLite and PostgreSQL: memory bounded by a batch,
all or nothing wherever in the stream it fails, and jobs queued in item order."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import Connection, func, select

from asynctask import Tracking, payload
from asynctask.brokers.redis.push import RedisStaging
from asynctask.job import JobDefinition
from asynctask.tasks import creation as tasks
from asynctask.tracking.models import Event, Task
from tests.tracking_fixtures import tracked_rows


@pytest.fixture(autouse=True)
def fifo_queues(conn: redis.Redis, namespace: str) -> None:
    """These look at queue:<queue>, where a fifo queue keeps a task's jobs; the same publish
    into a fair queue's share is tried in tests/brokers/fair_share/test_redis.py."""
    conn.sadd(f"{namespace}:asynctask:fifo", "default", "thirds")


def generated(count: int) -> Iterator[dict[str, Any]]:
    """CSV-like rows, made one at a time."""
    for index in range(count):
        yield {"row": index, "sku": f"SKU-{index:08d}", "name": f"product {index}", "price": index * 0.5}


def peak_bytes(create: Callable[[], Any]) -> int:
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    create()
    return tracemalloc.get_traced_memory()[1] - base


def test_memory_is_bounded_by_a_batch_not_by_the_task(
    redis_tracking: Tracking, noop_job: JobDefinition[Any], conn: redis.Redis, namespace: str
) -> None:
    """Peak traced memory of create_task for 50,000 generated rows vs 5,000: about the same,
    since either holds one batch (2,000 jobs) at a time.

    Measured on a 2-core VM (tracemalloc, after a warm-up task): 5,000 and 50,000 rows both
    peaked at 4.4 MB on SQLite and 4.2 MB on PostgreSQL. Before streaming
    (``list(items)`` and every job built up front) the peaks were 18.4 and 15.3 MB for 10,000
    rows, 181 and 154 MB for 100,000: proportional to the task.
    """
    create = tasks.create_task
    engine, client = redis_tracking.engine, redis_tracking.client
    create(engine, client, noop_job, generated(3000))  # warm-up: statement caches, scripts, pool
    tracemalloc.start()
    try:
        small = peak_bytes(lambda: create(engine, client, noop_job, generated(5_000)))
        large = peak_bytes(lambda: create(engine, client, noop_job, generated(50_000)))
    finally:
        tracemalloc.stop()
    assert large < 2 * small, f"peak {large:,} B for 50,000 rows vs {small:,} B for 5,000"
    assert conn.llen(f"{namespace}:queue:default") == 58_000
    with engine.connect() as connection:
        totals = connection.execute(select(Task.total).order_by(Task.total)).scalars().all()
        assert totals == [3000, 5_000, 50_000]
        assert connection.execute(select(func.count()).select_from(Event)).scalar() == 58_000


def poisoned_at(position: int, poison: Callable[[], Any]) -> Iterator[Any]:
    yield from range(position)
    yield poison()
    yield from range(position + 1, position + 1000)


def source_fails() -> Any:
    raise RuntimeError("the upload broke off")


@pytest.mark.parametrize(
    ("poison", "error", "match"),
    [
        pytest.param(set, TypeError, r"items\[50000\] is a set", id="not-json"),
        pytest.param(object, TypeError, r"items\[50000\] is a object", id="object"),
        pytest.param(lambda: "x" * (1024 * 1024 + 1), ValueError, "max_payload_bytes", id="too-big"),
        pytest.param(source_fails, RuntimeError, "broke off", id="source-raises"),
    ],
)
def test_a_bad_item_deep_in_the_stream_leaves_nothing(
    redis_tracking: Tracking,
    noop_job: JobDefinition[Any],
    conn: redis.Redis,
    namespace: str,
    poison: Callable[[], Any],
    error: type[Exception],
    match: str,
) -> None:
    """The 50,001st item is bad after 25 batches were written to SQL and staged in Redis:
    no task, no event, no staging list, and the queue holds what it held before."""
    waiting = redis_tracking.client.push({"class": "noop", "args": [["waiting"]]})
    queue = f"{namespace}:queue:default"
    before = conn.lrange(queue, 0, -1)
    with pytest.raises(error, match=match):
        redis_tracking.create_task(noop_job, poisoned_at(50_000, poison))
    assert tracked_rows(redis_tracking.engine) == (0, 0)
    assert list(conn.scan_iter(match=f"{namespace}:asynctask:staging:*")) == []
    assert conn.lrange(queue, 0, -1) == before and payload.loads(before[0])["jid"] == waiting


def popped(conn: redis.Redis, key: str) -> list[Any]:
    """The list's payloads in the order workers take them (from the right)."""
    return [payload.loads(raw) for raw in reversed(conn.lrange(key, 0, -1))]


@pytest.mark.parametrize("already", [0, 3], ids=["empty-queue", "queue-with-jobs"])
def test_jobs_are_queued_in_item_order_after_the_jobs_already_waiting(
    redis_tracking: Tracking, noop_job: JobDefinition[Any], conn: redis.Redis, namespace: str, already: int
) -> None:
    """5,000 items: three batches staged, and more than one 1,000-job slice of the publish
    script when the queue exists (RENAME when it does not)."""
    waiting = [redis_tracking.client.push({"class": "noop", "args": [[f"w{n}"]]}) for n in range(already)]
    task = redis_tracking.create_task(noop_job, iter(range(5000)))
    queue = f"{namespace}:queue:default"
    jobs = popped(conn, queue)
    assert [j["jid"] for j in jobs[:already]] == waiting
    ours = jobs[already:]
    assert [j["args"] for j in ours] == [[[n]] for n in range(5000)]
    assert {j["task"] for j in ours} == {task.id} and len({j["enqueued_at"] for j in ours}) == 1
    assert conn.ttl(queue) == -1  # the staging list's expiry did not come along with RENAME
    assert conn.smembers(f"{namespace}:queues") == {b"default"}
    assert list(conn.scan_iter(match=f"{namespace}:asynctask:staging:*")) == []
    assert task.status == "pending" and task.total == 5000
    with redis_tracking.engine.connect() as connection:
        events = connection.execute(select(Event.job_id, Event.params).order_by(Event.id)).all()
    assert [(e.job_id, e.params) for e in events] == [(j["jid"], j["args"]) for j in ours]


def test_jobs_a_middleware_routes_to_other_queues_keep_their_order(
    redis_tracking: Tracking, noop_job: JobDefinition[Any], conn: redis.Redis, namespace: str
) -> None:
    def route(item: Any, queue: str, call_next: Callable[[], Any]) -> Any:
        if item["args"][0][0] % 3 == 0:
            item["queue"] = "thirds"
        return call_next()

    redis_tracking.client.push({"class": "noop", "args": [["waiting"]], "queue": "thirds"})
    redis_tracking.client.middleware.add(route)
    task = redis_tracking.create_task(noop_job, range(4500), chunk_size=2)
    thirds = popped(conn, f"{namespace}:queue:thirds")
    rest = popped(conn, f"{namespace}:queue:default")
    assert thirds[0]["args"] == [["waiting"]]
    assert [j["args"][0] for j in thirds[1:]] == [[n, n + 1] for n in range(0, 4500, 6)]
    assert [j["args"][0] for j in rest] == [[n, n + 1] for n in range(0, 4500, 2) if n % 3]
    assert conn.smembers(f"{namespace}:queues") == {b"default", b"thirds"}
    assert task.total == 2250


def test_publish_moves_nothing_if_a_staging_list_changed(
    redis_tracking: Tracking,
    noop_job: JobDefinition[Any],
    conn: redis.Redis,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A staging list that lost jobs (it expired, say) fails the publish: the task is aborted
    and no job of it is queued."""
    publish = RedisStaging.publish

    def expired_first(staging: RedisStaging) -> int:
        conn.rpop(redis_tracking.client.keys.staging(staging.task_id, "default"))
        return publish(staging)

    monkeypatch.setattr(RedisStaging, "publish", expired_first)
    with pytest.raises(redis.ResponseError, match="holds 2999 jobs, expected 3000"):
        redis_tracking.create_task(noop_job, range(3000))
    with redis_tracking.engine.connect() as connection:
        task_id, total = connection.execute(select(Task.id, Task.total)).one()
    assert total == 3000 and redis_tracking.get_task(task_id).status == "aborted"
    assert conn.exists(f"{namespace}:queue:default") == 0
    assert list(conn.scan_iter(match=f"{namespace}:asynctask:staging:*")) == []


def test_redis_refusing_the_staging_records_the_task_aborted_without_events(
    redis_tracking: Tracking,
    noop_job: JobDefinition[Any],
    conn: redis.Redis,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis fails on the third batch: the transaction is rolled back, the two staged batches are
    deleted, and the task is recorded alone, aborted, so the attempt is visible."""
    write = RedisStaging.write
    calls = []

    def fails_third(staging: RedisStaging, by_queue: dict[str, list[str]], connection: Connection) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise redis.ConnectionError("Redis went away")
        write(staging, by_queue, connection)

    monkeypatch.setattr(RedisStaging, "write", fails_third)
    with pytest.raises(redis.ConnectionError):
        redis_tracking.create_task(noop_job, range(10_000), meta={"file": "a.csv"})
    with redis_tracking.engine.connect() as connection:
        (task_id,) = connection.execute(select(Task.id)).one()
        assert connection.execute(select(func.count()).select_from(Event)).scalar() == 0
    view = redis_tracking.get_task(task_id)
    assert view.status == "aborted" and view.total == 0 and view.meta == {"file": "a.csv"}
    assert list(conn.scan_iter(match=f"{namespace}:asynctask:staging:*")) == []
    assert conn.exists(f"{namespace}:queue:default") == 0


def test_params_with_separators_survive_batched_copy(
    redis_tracking: Tracking, noop_job: JobDefinition[Any]
) -> None:
    items = [{"text": f"tab\t{n}\nline\\{n}\r", "n": n} for n in range(4100)]
    task = redis_tracking.create_task(noop_job, iter(items))
    with redis_tracking.engine.connect() as connection:
        params = connection.execute(select(Event.params).order_by(Event.id)).scalars().all()
    assert params == [[[item]] for item in items] and task.total == 4100


def test_the_collector_is_paused_while_batches_are_written_and_left_as_found(
    redis_tracking: Tracking, noop_job: JobDefinition[Any]
) -> None:
    """Items are read batch by batch: a batch read after the first is read with the cyclic
    collector paused, and create_task leaves it as it found it, whether it ends or fails."""
    seen: list[bool] = []

    def items(count: int, fail: bool = False) -> Iterator[int]:
        for index in range(count):
            if index == 5_000:
                seen.append(gc.isenabled())
                if fail:
                    raise RuntimeError("the source broke")
            yield index

    redis_tracking.create_task(noop_job, items(6_000))
    assert seen == [False] and gc.isenabled()
    with pytest.raises(RuntimeError, match="the source broke"):
        redis_tracking.create_task(noop_job, items(6_000, fail=True))
    assert gc.isenabled()
    gc.disable()
    try:
        redis_tracking.create_task(noop_job, items(6_000))
        assert not gc.isenabled(), "a collector paused by the caller stays paused"
    finally:
        gc.enable()
