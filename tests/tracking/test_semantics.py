"""Tracking semantics on SQLite and PostgreSQL: standalone tracked jobs, logs and progress while
running, cancel, retry, and create_task's all-or-nothing promise."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select

from asynctask import (
    Client,
    JobFailed,
    JobNotRegistered,
    QueueSpec,
    Registry,
    Settings,
    TaskNotFound,
    TaskStateError,
    Tracking,
    current_job,
    job,
)
from asynctask.api import Queue
from asynctask.middleware import Chain
from asynctask.tasks import creation as tasks
from asynctask.tracking.models import Event, Task
from asynctask.worker import Worker
from tests.conftest import scratch_redis, wait_until
from tests.tracking_fixtures import tracked_rows, wait_for_task


def event_of(tracking: Tracking, jid: str) -> Any:
    with tracking.engine.connect() as connection:
        return connection.execute(select(Event.__table__).where(Event.job_id == jid)).first()


def test_a_job_tracked_on_its_own_gets_an_event_from_push_to_finish(
    redis_tracking: Tracking, registry: Registry, start_tracked_worker: Callable[..., Worker]
) -> None:
    @job(registry=registry, track=True)
    def lone(x: int) -> None:
        current_job().log(f"x is {x}")

    jid = lone.set(client=redis_tracking.client).perform_async(7)
    start_tracked_worker()
    row = wait_until(
        lambda: (r := event_of(redis_tracking, jid)) is not None and r.status == "finish" and r, 10
    )
    assert row.task_id is None and row.job_name == "lone" and row.params == [7] and row.attempt == 1


def test_enqueue_is_recorded_with_the_push_before_any_worker_runs(
    redis_tracking: Tracking,
    registry: Registry,
    redis_settings: Settings,
    start_tracked_worker: Callable[..., Worker],
) -> None:
    @job(registry=registry, track=True)
    def later() -> None:
        pass

    jid = later.set(client=redis_tracking.client).perform_async()
    # A worker's flusher applies the stream; with no job to run it applies only the enqueue.
    start_tracked_worker(queues=(QueueSpec("elsewhere"),))
    row = wait_until(lambda: event_of(redis_tracking, jid), timeout=10)
    assert row.status == "enqueue" and row.started_at is None and row.enqueued_at is not None


def test_log_and_progress_are_visible_while_the_job_runs(
    redis_tracking: Tracking, registry: Registry, start_tracked_worker: Callable[..., Worker]
) -> None:
    release = threading.Event()

    @job(registry=registry)
    def importer(rows: list[int]) -> None:
        current_job().log(f"imported {len(rows)} rows")
        current_job().progress(40, 200)
        release.wait(20)

    task = redis_tracking.create_task(importer, [1, 2, 3], chunk_size=3)
    start_tracked_worker()

    def visible() -> Any:
        page = redis_tracking.list_events(task.id)
        event = page.items[0]
        return event if event.status == "working" and event.progress_done == 40 and event.messages else None

    # Seen while the job still waits for its release: the job has not finished.
    event = wait_until(visible, timeout=10)
    assert not release.is_set()
    assert [m.text for m in event.messages] == ["started", "imported 3 rows"]
    assert event.progress_total == 200
    view = redis_tracking.get_task(task.id)
    assert view.status == "running" and view.counts["working"] == 1 and view.started_at is not None
    release.set()
    assert wait_for_task(redis_tracking, task.id).status == "finished"


def test_job_failed_is_failed_and_never_retried(
    redis_tracking: Tracking,
    registry: Registry,
    conn: redis.Redis,
    namespace: str,
    start_tracked_worker: Callable[..., Worker],
) -> None:
    @job(registry=registry, retry=5)
    def sign_up(products: list[int]) -> None:
        if products[0] % 2:
            raise JobFailed(f"product {products[0]} is not eligible")

    task = redis_tracking.create_task(sign_up, range(6))
    start_tracked_worker()
    view = wait_for_task(redis_tracking, task.id)
    assert view.status == "finished_with_errors"
    assert view.counts["failed"] == 3 and view.counts["finish"] == 3
    assert sorted(e.error for e in view.errors) == [f"product {n} is not eligible" for n in (1, 3, 5)]
    assert conn.zcard(f"{namespace}:retry") == 0 and conn.zcard(f"{namespace}:dead") == 0


def test_cancel_task_stops_waiting_jobs_and_running_jobs_see_the_flag(
    redis_tracking: Tracking, registry: Registry, start_tracked_worker: Callable[..., Worker]
) -> None:
    ran: list[int] = []
    saw_cancel = threading.Event()

    @job(registry=registry)
    def step(items: list[int]) -> None:
        ran.append(items[0])
        if items[0] == 0:
            deadline = time.monotonic() + 20
            while not current_job().cancelled and time.monotonic() < deadline:
                time.sleep(0.02)
            if current_job().cancelled:
                saw_cancel.set()

    task = redis_tracking.create_task(step, range(30))
    worker = start_tracked_worker(concurrency=1)
    wait_until(lambda: redis_tracking.get_task(task.id).counts["working"] == 1, timeout=10)
    view = redis_tracking.cancel_task(task.id)
    assert view.status == "cancelled" and view.counts["cancelled"] == 29 and view.cancelled_at is not None
    assert saw_cancel.wait(10)
    final = wait_until(
        lambda: (v := redis_tracking.get_task(task.id)).counts["working"] == 0 and v, timeout=10
    )
    # The worker has claimed and dropped every cancelled job: none is left to run.
    queue = Queue("default", settings=redis_tracking.client.settings)
    wait_until(lambda: queue.size == 0 and not worker.fetch.held(), timeout=10)
    assert ran == [0]
    assert final.counts == {
        "enqueue": 0,
        "working": 0,
        "finish": 1,
        "failed": 0,
        "error": 0,
        "cancelled": 29,
        "stopped": 0,
        "lost": 0,
    }
    assert final.status == "cancelled" and final.finished_at is not None
    with pytest.raises(TaskStateError):
        redis_tracking.retry_task(task.id)


def test_retry_task_runs_failed_and_error_jobs_again(
    redis_tracking: Tracking, registry: Registry, start_tracked_worker: Callable[..., Worker]
) -> None:
    fixed = threading.Event()
    runs: list[int] = []

    @job(registry=registry, retry=False)
    def flaky(items: list[int]) -> None:
        runs.append(items[0])
        if not fixed.is_set():
            if items[0] == 1:
                raise JobFailed("not yet")
            if items[0] == 2:
                raise RuntimeError("boom")

    task = redis_tracking.create_task(flaky, range(4))
    start_tracked_worker()
    first = wait_for_task(redis_tracking, task.id)
    assert first.counts["failed"] == 1 and first.counts["error"] == 1 and first.counts["finish"] == 2
    fixed.set()
    assert redis_tracking.retry_task(task.id) == 2
    final = wait_until(lambda: (v := redis_tracking.get_task(task.id)).status == "finished" and v, timeout=10)
    assert final.counts["finish"] == 4 and final.counts["failed"] == 0 and final.counts["error"] == 0
    assert sorted(runs) == [0, 1, 1, 2, 2, 3]
    events = {(e.params or [[None]])[0][0]: e for e in redis_tracking.list_events(task.id).items}
    assert [m.text for m in events[2].messages] == [
        "started",
        "RuntimeError: boom",
        "not retried (retry: false)",
        "retried by request",
        "started",
        "finished",
    ]
    assert events[2].attempt == 2


def test_cancel_and_retry_leave_another_tenants_task_alone(
    redis_tracking: Tracking, registry: Registry, conn: redis.Redis, namespace: str
) -> None:
    @job(registry=registry)
    def rows(items: list[int]) -> None:
        pass

    task = redis_tracking.create_task(rows, range(3), tenant="acme")
    with pytest.raises(TaskNotFound):
        redis_tracking.cancel_task(task.id, tenant="globex")
    with pytest.raises(TaskNotFound):
        redis_tracking.retry_task(task.id, tenant="globex")
    with pytest.raises(TaskNotFound):
        redis_tracking.retry_task(task.id, tenant="")
    view = redis_tracking.get_task(task.id)
    assert view.status == "pending" and view.cancelled_at is None and view.counts["enqueue"] == 3
    assert Queue("default", settings=redis_tracking.client.settings).size == 3
    assert redis_tracking.retry_task(task.id, tenant="acme") == 0
    assert redis_tracking.cancel_task(task.id, tenant="acme").counts["cancelled"] == 3


@pytest.fixture
def full_redis(tmp_path: Path) -> Iterator[redis.Redis]:
    """A private redis-server (the shared one must keep accepting writes) that refuses writes
    once it uses 2 MB more than at start: Redis checks the limit before each command, so the
    first batch of a big task is staged and a later one is refused."""
    with scratch_redis(tmp_path, "--maxmemory-policy", "noeviction") as conn:
        conn.config_set("maxmemory", conn.info("memory")["used_memory"] + 2_000_000)
        yield conn


def test_create_task_is_all_or_nothing_when_redis_is_unreachable(
    database_engine: Engine, tracked_settings: Settings, registry: Registry
) -> None:
    @job(registry=registry)
    def never(items: list[int]) -> None:
        raise AssertionError("must not run")

    dead_redis = Settings(**{**tracked_settings.__dict__, "redis_url": "redis://127.0.0.1:1/0"})
    broken = Tracking(Client(dead_redis, registry=registry, middleware=Chain()), database_engine)
    with pytest.raises(redis.ConnectionError):
        broken.create_task(never, range(100))
    assert_aborted_alone(broken)


def test_create_task_is_all_or_nothing_when_redis_refuses_a_later_batch(
    database_engine: Engine, tracked_settings: Settings, registry: Registry, full_redis: redis.Redis
) -> None:
    @job(registry=registry)
    def never(items: list[int]) -> None:
        raise AssertionError("must not run")

    port = full_redis.connection_pool.connection_kwargs["port"]
    refusing = Settings(**{**tracked_settings.__dict__, "redis_url": f"redis://127.0.0.1:{port}/0"})
    client = Client(refusing, registry=registry, middleware=Chain())
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            Tracking(client, database_engine).create_task(never, range(10 * tasks.BATCH))
        assert_aborted_alone(Tracking(client, database_engine))
    finally:
        client.broker.close()
    lpush = full_redis.info("commandstats")["cmdstat_lpush"]
    assert lpush["calls"] >= 1 and lpush["rejected_calls"] >= 1, "no batch was staged before the refusal"
    # Neither the staged batches nor any queue are left behind.
    assert full_redis.dbsize() == 0, full_redis.keys()


def assert_aborted_alone(tracking: Tracking) -> None:
    """The task is recorded aborted, with no event: nothing of it was written or enqueued."""
    with tracking.engine.connect() as connection:
        (task_id,) = connection.execute(select(Task.id)).one()
        assert connection.execute(select(func.count()).select_from(Event)).scalar() == 0
    view = tracking.get_task(task_id)
    assert view.status == "aborted" and view.total == 0 and view.counts["enqueue"] == 0


def test_create_task_rejects_bad_input_before_writing_anything(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine, conn: redis.Redis, namespace: str
) -> None:
    @job(registry=registry)
    def one(items: list[Any]) -> None:
        pass

    @job(registry=registry)
    def two_args(items: list[Any], extra: int) -> None:
        pass

    with pytest.raises(JobNotRegistered):
        redis_tracking.create_task("missing", [1])
    with pytest.raises(ValueError, match="chunk_size"):
        redis_tracking.create_task(one, [1], chunk_size=0)
    with pytest.raises(ValueError, match="at least one item"):
        redis_tracking.create_task(one, [])
    with pytest.raises(TypeError):
        redis_tracking.create_task(one, [object()])
    with pytest.raises(Exception, match="cannot take"):
        redis_tracking.create_task(two_args, [1])

    def drop(job: Any, queue: str, call_next: Callable[[], Any]) -> Any:
        return None if job["args"][0][0] == 3 else call_next()

    redis_tracking.client.middleware.add(drop)
    with pytest.raises(ValueError, match="dropped"):
        redis_tracking.create_task(one, range(5))
    assert tracked_rows(database_engine) == (0, 0)
    assert conn.llen(f"{namespace}:queue:default") == 0


def test_chunks_pages_tenants_and_unknown_ids(redis_tracking: Tracking, registry: Registry) -> None:
    @job(registry=registry, queue="imports")
    def rows(items: list[int]) -> None:
        pass

    task = redis_tracking.create_task(rows, range(25), chunk_size=10, tenant="acme", meta={"file": "a.csv"})
    assert task.total == 3 and task.queue == "imports" and task.meta == {"file": "a.csv"}
    events = redis_tracking.list_events(task.id, limit=2)
    assert [e.params for e in events.items] == [[list(range(10))], [list(range(10, 20))]]
    rest = redis_tracking.list_events(task.id, after=events.next_cursor, limit=2)
    assert [e.params for e in rest.items] == [[list(range(20, 25))]] and rest.next_cursor is None
    assert redis_tracking.list_events(task.id, status="finish").items == ()

    other = redis_tracking.create_task(rows, [1], tenant="acme")
    redis_tracking.create_task(rows, [1], tenant="globex")
    page = redis_tracking.list_tasks("acme", limit=1)
    assert [t.id for t in page.items] == [other.id]
    assert [t.id for t in redis_tracking.list_tasks("acme", before=page.next_cursor).items] == [task.id]
    with pytest.raises(TaskNotFound):
        redis_tracking.get_task(task.id, tenant="globex")
    with pytest.raises(TaskNotFound):
        redis_tracking.list_events("no-such-task")
    with pytest.raises(ValueError):
        redis_tracking.list_events(task.id, status="bogus")
    with pytest.raises(ValueError):
        redis_tracking.list_events(task.id, limit=0)


def test_items_with_separators_and_escapes_are_stored_exactly(
    redis_tracking: Tracking, registry: Registry
) -> None:
    @job(registry=registry, name="odd\tname\\x")
    def odd(items: list[Any]) -> None:
        pass

    items = [
        "tab\there",
        "new\nline",
        "back\\slash",
        "cr\rlf",
        'quote " and \\" escaped',
        "日本語 ✓",
        {"k": [1.5, None]},
    ]
    task = redis_tracking.create_task(odd, items, chunk_size=len(items))
    (event,) = redis_tracking.list_events(task.id).items
    assert event.params == [items] and event.job_name == "odd\tname\\x"
