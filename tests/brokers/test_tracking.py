"""Task tracking on every broker: a task's jobs, its counts and its events follow the jobs the
same way whether they live in Redis (transitions through the stream and a flusher) or in SQL
(transitions applied in the job's own transaction)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from sqlalchemy import Engine, select

from asynctask import JobFailed, Registry, Settings, Tracking, current_job, job
from asynctask.api import Queue
from asynctask.job import JobDefinition
from asynctask.middleware import Chain, TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.tracking.models import Event
from asynctask.worker import Worker
from tests.brokers.conftest import AwaitedTracking, MakeClient, awaited_job
from tests.conftest import wait_until
from tests.tracking_fixtures import tracked_rows, wait_for_task


@pytest.fixture(params=["sync", "async"])
def side(request: pytest.FixtureRequest) -> str:
    """Each test runs twice: sync jobs created and read with the sync calls, then async jobs
    created and read with the awaited ones (``acreate_task``...)."""
    return str(request.param)


@pytest.fixture
def tracking(
    side: str, make_client: MakeClient, engine: Engine, settings: Settings, registry: Registry
) -> Iterator[Tracking]:
    if side == "sync":
        yield Tracking(make_client(middleware=Chain([TrackingClientMiddleware()])), engine)
        return
    awaited = AwaitedTracking(settings, registry)
    yield cast(Tracking, awaited)
    awaited.close()


@pytest.fixture
def rows(side: str, registry: Registry) -> JobDefinition[Any]:
    def rows(chunk: list[int]) -> None:
        first = chunk[0]
        if first == 5:
            raise JobFailed(f"row {first} breaks a rule")
        if first == 10 and current_job().retry_count is None:
            raise RuntimeError("flaky once")
        if first == 15:
            raise ValueError("always broken")
        current_job().log(f"imported {len(chunk)} rows")

    definition = job(registry=registry, retry=1)(rows if side == "sync" else awaited_job(rows))

    @definition.retry_in
    def _soon(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        return 0.01

    return definition


def start_tracked(start_worker: Callable[..., Worker]) -> Worker:
    # The flusher thread (Redis only; SQL applies transitions itself) starts with the worker.
    return start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")


def test_a_task_runs_to_its_final_counts(
    tracking: Tracking, rows: JobDefinition[Any], start_worker: Callable[..., Worker]
) -> None:
    task = tracking.create_task(rows, range(25), chunk_size=5)
    assert (task.total, task.counts["enqueue"]) == (5, 5)
    start_tracked(start_worker)
    # The flaky job's retry comes after Sidekiq's jitter (up to 18 s at the first retry).
    done = wait_for_task(tracking, task.id, timeout=40)
    assert done.status == "finished_with_errors"
    assert {k: v for k, v in done.counts.items() if v} == {"finish": 3, "failed": 1, "error": 1}
    events = {e.params[0][0] if e.params else None: e for e in tracking.list_events(task.id).items}
    assert events[10].status == "finish" and events[10].attempt == 2
    assert events[5].error == "row 5 breaks a rule"
    assert events[15].error_class == "ValueError"
    assert "imported 5 rows" in [m.text for m in events[0].messages]


def test_an_invalid_item_leaves_no_task_and_no_job(
    tracking: Tracking, rows: JobDefinition[Any], engine: Engine, settings: Settings
) -> None:
    items = [*range(4999), {"not": "an int"}, object()]
    with pytest.raises(TypeError, match=r"items\[5000\]"):
        tracking.create_task(rows, iter(items))
    assert tracked_rows(engine) == (0, 0)
    assert Queue("default", settings=settings).size == 0


def test_a_cancelled_task_never_runs_its_waiting_jobs(
    tracking: Tracking, rows: JobDefinition[Any], start_worker: Callable[..., Worker], settings: Settings
) -> None:
    task = tracking.create_task(rows, range(20, 40), chunk_size=2)
    cancelled = tracking.cancel_task(task.id)
    assert cancelled.status == "cancelled" and cancelled.counts["cancelled"] == 10
    start_tracked(start_worker)
    queue = Queue("default", settings=settings)
    # The worker takes the jobs and drops them unrun: the queue empties, no event changes.
    wait_until(lambda: queue.size == 0, 10)
    view = tracking.get_task(task.id)
    assert view.counts["cancelled"] == 10 and view.counts["finish"] == 0


def test_a_tracked_unique_job_pushed_twice_has_one_event(
    make_client: MakeClient, registry: Registry, engine: Engine, start_worker: Callable[..., Worker]
) -> None:
    @job(registry=registry, track=True, unique_for=60)
    def sync(account: int) -> None: ...

    client = make_client(middleware=Chain([TrackingClientMiddleware()]))
    first = sync.set(client=client).perform_async(1)
    assert sync.set(client=client).perform_async(1) == first
    start_tracked(start_worker)

    def statuses() -> list[str]:
        with engine.connect() as connection:
            return list(connection.execute(select(Event.status).where(Event.job_name == "sync")).scalars())

    # The duplicate's push stored nothing, so it must not leave an event waiting for ever.
    wait_until(lambda: statuses() == ["finish"], 10)


def test_a_bulk_job_an_outer_middleware_drops_leaves_no_event(
    make_client: MakeClient, registry: Registry, engine: Engine, start_worker: Callable[..., Worker]
) -> None:
    @job(registry=registry, track=True)
    def sync(account: int) -> None: ...

    def drop_odd_after(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        # Around the tracking middleware: it recorded the job's event before this drops it.
        pushed = call_next()
        return None if job["args"][0] % 2 else pushed

    client = make_client(middleware=Chain([drop_odd_after, TrackingClientMiddleware()]))
    assert len(sync.set(client=client).perform_bulk([[n] for n in range(6)], batch_size=4)) == 3
    start_tracked(start_worker)

    def params() -> list[Any]:
        with engine.connect() as connection:
            rows = connection.execute(select(Event.params, Event.status).where(Event.job_name == "sync"))
            return sorted((p[0], status) for p, status in rows)

    wait_until(lambda: params() == [(0, "finish"), (2, "finish"), (4, "finish")], 10)


def test_an_error_that_a_middleware_swallows_is_still_recorded(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    """The tracking middleware holds a failure's ``error`` for the runtime's decision; a
    middleware around it that swallows the failure means no decision comes: the ``error`` is
    written when the job's run ends."""

    @job(registry=registry)
    def broken(chunk: list[int]) -> None:
        raise ValueError("broken")

    def swallow(definition: Any, job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        try:
            return call_next()
        except ValueError:
            return None

    task = tracking.create_task(broken, [1])
    start_worker(server_middleware=Chain([swallow, TrackingServerMiddleware()]), flusher="thread")
    done = wait_for_task(tracking, task.id, timeout=20)
    assert {k: v for k, v in done.counts.items() if v} == {"error": 1}
