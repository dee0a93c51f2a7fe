"""The task calls awaited on an event loop (``acreate_task`` and the rest) on every backend:
the loop runs other coroutines while they wait, no thread pool carries them, and tasks
created side by side on one loop are each whole. (tests/brokers/test_tracking.py runs the
tracking suite through them too.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, func, select

import asynctask
from asynctask import AsyncTracking, Client, Registry, Settings
from asynctask import client as client_module
from asynctask.api import Queue
from asynctask.middleware import Chain, TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.tasks import runtime
from asynctask.tasks.runtime import RuntimeJob
from asynctask.tracking.models import Event, Task
from asynctask.worker import Worker
from tests.tracking_fixtures import tracked_rows


@pytest.fixture
def rows(registry: Registry) -> Any:
    @asynctask.job(registry=registry)
    def rows(chunk: list[int]) -> None: ...

    return rows


@pytest.fixture
def run_on_loop(settings: Settings, registry: Registry, engine: Engine) -> Iterator[Callable[..., Any]]:
    """Run ``coroutine_function(tracking)`` on a fresh loop with an ``AsyncTracking`` of its own."""

    def run(coroutine_function: Callable[[AsyncTracking], Any]) -> Any:
        async def main() -> Any:
            tracking = AsyncTracking(
                settings, registry=registry, middleware=Chain([TrackingClientMiddleware()])
            )
            try:
                return await coroutine_function(tracking)
            finally:
                await tracking.aclose()

        return asyncio.run(main())

    yield run


def pool_threads() -> list[str]:
    """Threads of an executor (asyncio's default one names them ``asyncio_N``)."""
    return [
        thread.name
        for thread in threading.enumerate()
        if thread.name.startswith("asyncio_") or "ThreadPoolExecutor" in thread.name
    ]


def test_the_loop_runs_other_coroutines_while_a_task_is_created_read_and_cancelled(
    run_on_loop: Callable[..., Any], rows: Any, settings: Settings
) -> None:
    async def calls(tracking: AsyncTracking) -> tuple[int, int, list[str]]:
        ticks = 0
        done = False

        async def tick() -> None:
            nonlocal ticks
            while not done:
                await asyncio.sleep(0)
                ticks += 1

        ticker = asyncio.create_task(tick())
        task = await tracking.acreate_task(rows, range(6000))
        created_ticks = ticks
        view = await tracking.aget_task(task.id)
        page = await tracking.alist_events(task.id, limit=10)
        cancelled = await tracking.acancel_task(task.id)
        threads = pool_threads()
        done = True
        await ticker
        assert view.total == 6000 and len(page.items) == 10
        return created_ticks, cancelled.counts["cancelled"], threads

    ticks, cancelled, threads = run_on_loop(calls)
    # Each round trip of the create hands the loop back: a few per batch of 2,000 items.
    assert ticks >= 3
    assert cancelled == 6000
    assert threads == []
    assert Queue("default", settings=settings).size == 6000


def test_tasks_created_side_by_side_on_one_loop_are_each_whole(
    run_on_loop: Callable[..., Any], rows: Any, settings: Settings, engine: Engine
) -> None:
    async def create(tracking: AsyncTracking) -> list[Any]:
        # Several batches each, interleaved: one task's transaction waits on the loop while
        # another's runs (on SQLite, in its busy timeout, never holding the loop).
        return list(await asyncio.gather(*(tracking.acreate_task(rows, range(4500)) for _ in range(4))))

    views = run_on_loop(create)
    assert [view.total for view in views] == [4500] * 4
    assert all(view.status == "pending" for view in views)
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(Event)).scalar() == 18000
    assert Queue("default", settings=settings).size == 18000


def test_a_fed_task_shows_and_drops_its_held_jobs(
    run_on_loop: Callable[..., Any], rows: Any, settings: Settings
) -> None:
    async def calls(tracking: AsyncTracking) -> tuple[Any, Any, Any]:
        task = await tracking.acreate_task(rows, range(30), parallel=4)
        paused = await tracking.apause_task(task.id)
        view = await tracking.aget_task(task.id)
        cancelled = await tracking.acancel_task(task.id)
        return paused, view, cancelled

    paused, view, cancelled = run_on_loop(calls)
    assert paused is not None and paused.feed.paused
    assert view.feed is not None and view.feed.held == 26
    assert cancelled.counts["cancelled"] == 30


def test_the_module_calls_use_the_configured_client(
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    registry: Registry,
    rows: Any,
    engine: Engine,
    start_worker: Callable[..., Worker],
) -> None:
    configured = Client(settings, registry=registry, middleware=Chain([TrackingClientMiddleware()]))
    monkeypatch.setattr(client_module, "_default", configured)

    async def create() -> str:
        task = await asynctask.acreate_task(rows, range(5), meta={"file": "rows.csv"})
        await asynctask.default_async_tracking().aclose()
        return task.id

    task_id = asyncio.run(create())
    start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")

    async def finished() -> Any:
        deadline = time.monotonic() + 15
        tracking = asynctask.default_async_tracking()
        try:
            while time.monotonic() < deadline:
                view = await asynctask.aget_task(task_id)
                if view.status == "finished":
                    return view, await asynctask.alist_events(task_id)
                await asyncio.sleep(0.05)
            raise AssertionError("the task did not finish")
        finally:
            await tracking.aclose()

    view, page = asyncio.run(finished())
    assert view.meta == {"file": "rows.csv"} and view.counts["finish"] == 5
    assert sorted(event.params for event in page.items) == [[[n]] for n in range(5)]
    with engine.connect() as connection:
        assert connection.execute(select(Task.job_name)).scalar_one() == rows.name
    configured.close()


def test_a_task_is_refused_whole_when_a_later_batch_is_invalid(
    run_on_loop: Callable[..., Any], rows: Any, settings: Settings, engine: Engine
) -> None:
    async def create(tracking: AsyncTracking) -> None:
        with pytest.raises(ValueError, match="limit"):
            await tracking.acreate_task(rows, [*range(4500), "x" * (settings.max_payload_bytes + 1)])

    run_on_loop(create)
    assert tracked_rows(engine) == (0, 0)
    assert Queue("default", settings=settings).size == 0


def test_tasks_cancelled_side_by_side_on_one_loop_are_each_cancelled(
    rows: Any, settings: Settings, registry: Registry, engine: Engine
) -> None:
    """Each cancel writes the broker's store in transactions of its own, while the others wait
    on the loop: none of them may hold the loop while it waits (a thread that hangs fails)."""
    outcome: list[list[int]] = []

    async def calls() -> None:
        tracking = AsyncTracking(settings, registry=registry, middleware=Chain([TrackingClientMiddleware()]))
        try:
            tasks = [await tracking.acreate_task(rows, range(10), parallel=2) for _ in range(4)]
            views = await asyncio.gather(*(tracking.acancel_task(task.id) for task in tasks))
            outcome.append([view.counts["cancelled"] for view in views])
        finally:
            await tracking.aclose()

    thread = threading.Thread(target=asyncio.run, args=(calls(),), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the loop hung"
    assert outcome == [[10, 10, 10, 10]]


class _Unsent:
    """A runtime's client that must never be reached: the refusal comes first."""

    def send(self, batch: Any) -> None:
        raise AssertionError("sent")


@pytest.mark.parametrize("backend", ["sqlite"])
def test_another_runtimes_jobs_are_refused_on_a_loop_before_anything_is_written(
    run_on_loop: Callable[..., Any], registry: Registry, engine: Engine
) -> None:
    """Their runtime's client blocks: such a task is created with ``create_task``, in a thread."""
    elsewhere = runtime.register(
        RuntimeJob(lambda chunk: None, "celery_rows", runtime="celery", queue="default", sender=_Unsent()),
        registry,
    )

    async def create(tracking: AsyncTracking) -> None:
        with pytest.raises(TypeError, match="in a thread"):
            await tracking.acreate_task(elsewhere, range(3))

    run_on_loop(create)
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(Task)).scalar() == 0


def test_a_chain_is_created_on_a_loop_each_task_waiting_for_the_one_before(
    run_on_loop: Callable[..., Any], rows: Any
) -> None:
    async def scenario(tracking: AsyncTracking) -> list[Any]:
        made = await tracking.achain(
            asynctask.step(rows, range(4)), asynctask.step(rows, range(2), chunk_size=2)
        )
        return [made, await tracking.aget_task(made[1].id)]

    [first, second], shown = run_on_loop(scenario)
    assert (first.hold, second.hold, second.total) == (None, "waiting", 1)
    assert [parent.task_id for parent in shown.parents] == [first.id]
