"""Async jobs on every backend: awaited side by side on the worker's event loop, beyond its
thread count, each with its own ``current_job()``; settled as sync jobs are (acknowledged,
retried, tracked, bounded by flow control and feeds); held by the process while they run;
cancelled and pushed back by a hard shutdown, cancelled for good when their task is; and a job
that blocks the loop is named."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, select

import asynctask
from asynctask import Client, Registry, Settings, Tracking
from asynctask.api import ProcessSet, Queue, Stats
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.tracking.models import Event
from asynctask.worker import Worker
from asynctask.worker.asyncjobs import CANCEL_GRACE
from tests.conftest import wait_for_beats, wait_until
from tests.tracking_fixtures import wait_for_task

StartWorker = Callable[..., Worker]


class Overlap:
    """Counts the jobs inside it at once; ``most``: the highest that count reached."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    def __enter__(self) -> None:
        self.now += 1
        self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        self.now -= 1


def test_async_jobs_are_awaited_together_beyond_the_thread_count(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    seen: dict[int, str] = {}
    overlap = Overlap()

    @asynctask.job(registry=registry)
    async def fetch(n: int) -> None:
        with overlap:
            await asyncio.sleep(0.3)
        # Read after the others started: each job still sees its own context.
        seen[n] = asynctask.current_job().jid

    jids = fetch.set(client=client).perform_bulk([[n] for n in range(40)])
    stats = Stats(settings=settings)
    start = time.monotonic()
    start_worker(concurrency=2, async_concurrency=40)
    wait_until(lambda: stats.refresh().processed == 40, 15)
    # 40 jobs of 0.3 s on 2 threads would take 6 s.
    assert time.monotonic() - start < 4
    assert overlap.most > 10
    assert seen == dict(enumerate(jids))
    assert (stats.failed, stats.retry_size, stats.enqueued) == (0, 0, 0)


def test_async_concurrency_bounds_the_jobs_awaited_at_once(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    overlap = Overlap()

    @asynctask.job(registry=registry)
    async def fetch(n: int) -> None:
        with overlap:
            await asyncio.sleep(0.05)

    fetch.set(client=client).perform_bulk([[n] for n in range(60)])
    stats = Stats(settings=settings)
    start_worker(concurrency=4, async_concurrency=5)
    wait_until(lambda: stats.refresh().processed == 60, 15)
    assert overlap.most == 5


def test_an_async_job_holds_its_claim_while_it_runs(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    """The claim check gives back jobs no thread holds; one awaited on the loop is held."""
    runs: list[str] = []

    @asynctask.job(registry=registry)
    async def slow() -> None:
        runs.append(asynctask.current_job().jid)
        await asyncio.sleep(3 * settings.heartbeat_interval + 1)

    jid = slow.set(client=client).perform_async()
    stats = Stats(settings=settings)
    worker = start_worker()
    wait_until(lambda: runs == [jid])
    wait_for_beats(lambda: getattr(ProcessSet(settings=settings).get(worker.identity), "beat", None), count=4)
    wait_until(lambda: stats.refresh().processed == 1, 10)
    assert runs == [jid]
    assert Queue("default", settings=settings).size == 0


def test_a_hard_shutdown_cancels_an_async_job_and_pushes_it_back(
    registry: Registry,
    tracking: Tracking,
    settings: Settings,
    engine: Engine,
    start_worker: StartWorker,
) -> None:
    started = threading.Event()
    outcome: list[str] = []

    @asynctask.job(registry=registry, track=True)
    async def long_call() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    jid = long_call.set(client=tracking.client).perform_async()
    worker = start_worker(
        server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread", timeout=0.5
    )
    assert started.wait(10)
    begun = time.monotonic()
    worker.stop()
    wait_until(lambda: worker._stopped.is_set(), 10)
    assert time.monotonic() - begun < 5
    assert outcome == ["cancelled"]
    [pushed_back] = list(Queue("default", settings=settings))
    assert pushed_back.jid == jid
    stats = Stats(settings=settings)
    assert (stats.retry_size, stats.dead_size) == (0, 0)

    def event() -> tuple[str, int, str | None]:
        with engine.connect() as connection:
            query = select(Event.status, Event.attempt, Event.error).where(Event.job_id == jid)
            return tuple(connection.execute(query).one())

    wait_until(lambda: event() == ("enqueue", 1, "interrupted by shutdown"), 10)


def test_a_sync_middleware_wraps_an_async_job_and_sees_it(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    calls: list[tuple[str, str, str]] = []

    def around(definition: Any, job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        calls.append(("before", asynctask.current_job().jid, threading.current_thread().name))
        try:
            return call_next()
        finally:
            calls.append(("after", job["jid"], ""))

    @asynctask.job(registry=registry)
    async def fetch() -> None:
        await asyncio.sleep(0.01)
        calls.append(("job", asynctask.current_job().jid, threading.current_thread().name))

    jid = fetch.set(client=client).perform_async()
    stats = Stats(settings=settings)
    start_worker(server_middleware=Chain([around]))
    wait_until(lambda: stats.refresh().processed == 1, 10)
    assert [(step, seen) for step, seen, _ in calls] == [("before", jid), ("job", jid), ("after", jid)]
    assert calls[0][2].startswith("asynctask-middleware")
    assert calls[1][2] == "asynctask-event-loop"


@pytest.mark.parametrize("backend", ["redis"])
def test_an_async_job_that_blocks_the_loop_is_named_once(
    registry: Registry,
    client: Client,
    settings: Settings,
    start_worker: StartWorker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    @asynctask.job(registry=registry)
    async def blocker() -> None:
        # Longer than a heartbeat interval (0.5 s): a beat falls after the block, not only in it.
        time.sleep(0.7)

    @asynctask.job(registry=registry)
    async def polite(n: int) -> None:
        await asyncio.sleep(0.01)

    stats = Stats(settings=settings)
    caplog.set_level(logging.WARNING, logger="asynctask.asyncjobs")
    blocker.set(client=client).perform_async()
    start_worker(concurrency=1)
    processes = ProcessSet(settings=settings)
    # The heartbeat after a block reports all of it (``/metrics``' event loop lag): the tick
    # before the block came at most TICK (20 ms) before it.
    wait_until(lambda: any(p.loop_lag_us >= 680_000 for p in processes.processes()), 10, interval=0.05)
    blocker.set(client=client).perform_async()
    wait_until(lambda: stats.refresh().processed == 2, 10)
    polite.set(client=client).perform_bulk([[n] for n in range(20)])
    wait_until(lambda: stats.refresh().processed == 22, 10)
    reports = [r for r in caplog.records if r.name == "asynctask.asyncjobs"]
    assert len(reports) == 1
    assert "async job blocker blocked the event loop" in reports[0].getMessage()


def test_a_concurrency_key_bounds_its_async_jobs(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    overlap = Overlap()
    ran: list[int] = []

    @asynctask.job(registry=registry, concurrency_key="device:{device}", concurrency_limit=2)
    async def call_device(device: str, n: int) -> None:
        with overlap:
            await asyncio.sleep(0.05)
        ran.append(n)

    call_device.set(client=client).perform_bulk([["d1", n] for n in range(12)])
    stats = Stats(settings=settings)
    start_worker(concurrency=4, async_concurrency=50)
    wait_until(lambda: stats.refresh().processed == 12, 15)
    assert sorted(ran) == list(range(12))
    assert overlap.most == 2


def test_a_fed_task_of_async_jobs_runs_at_most_parallel_at_once(
    registry: Registry, tracking: Tracking, start_worker: StartWorker
) -> None:
    overlap = Overlap()

    @asynctask.job(registry=registry)
    async def call_device(chunk: list[int]) -> None:
        with overlap:
            await asyncio.sleep(0.05)

    task = tracking.create_task(call_device, range(15), chunk_size=1, parallel=3)
    start_worker(
        server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread", async_concurrency=50
    )
    done = wait_for_task(tracking, task.id, timeout=30)
    assert done.status == "finished" and done.counts["finish"] == 15
    assert overlap.most == 3


def test_a_running_async_job_of_a_cancelled_task_is_cancelled_after_the_grace(
    registry: Registry, tracking: Tracking, settings: Settings, start_worker: StartWorker
) -> None:
    started = threading.Event()
    cancelled_at: list[float] = []

    @asynctask.job(registry=registry)
    async def sweep(chunk: list[int]) -> None:
        started.set()
        try:
            while True:
                await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            cancelled_at.append(time.monotonic())
            raise

    task = tracking.create_task(sweep, [1], chunk_size=1)
    start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")
    assert started.wait(10)
    asked = time.monotonic()
    tracking.cancel_task(task.id)
    wait_until(lambda: cancelled_at, 10)
    # Not before the grace; then within a check and a claim's news of the cancel.
    assert CANCEL_GRACE <= cancelled_at[0] - asked <= CANCEL_GRACE + 3

    def cancelled_while_running() -> bool:
        [event] = tracking.list_events(task.id).items
        # The cancel itself may mark the event first; the job's own record comes with its end.
        return event.status == "cancelled" and "task cancelled; cancelled while running" in [
            m.text for m in event.messages
        ]

    wait_until(cancelled_while_running, 10)
    stats = Stats(settings=settings)
    wait_until(lambda: stats.refresh().processed == 1, 10)
    assert (stats.failed, stats.retry_size, stats.dead_size, stats.enqueued) == (0, 0, 0, 0)


def test_a_slot_freed_as_the_process_goes_quiet_starts_no_job(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    """As a recycle does: the job that held the only slot ends by making the process quiet; the
    job a thread holds, waiting for that slot, goes back to its queue unstarted."""
    ran: list[int] = []
    workers: list[Worker] = []

    class QuietAfterEachJob:
        def __call__(
            self, definition: Any, job: dict[str, Any], queue: str, call_next: Callable[[], Any]
        ) -> Any:
            return call_next()

        async def acall(
            self, definition: Any, job: dict[str, Any], queue: str, call_next: Callable[[], Any]
        ) -> Any:
            try:
                return await call_next()
            finally:
                workers[0].quiet()

    @asynctask.job(registry=registry)
    async def step(n: int) -> None:
        ran.append(n)
        await asyncio.sleep(0.3)

    _, second = step.set(client=client).perform_bulk([[1], [2]])
    workers.append(
        start_worker(concurrency=1, async_concurrency=1, server_middleware=Chain([QuietAfterEachJob()]))
    )
    wait_until(lambda: workers[0].manager.quieting.is_set(), 10)
    wait_for_beats(lambda: getattr(ProcessSet(settings=settings).get(workers[0].identity), "beat", None))
    assert ran == [1]
    assert [record.jid for record in Queue("default", settings=settings)] == [second]


@pytest.mark.parametrize("backend", ["redis"])
def test_a_cancelled_tasks_job_is_cancelled_once_and_may_clean_up(
    registry: Registry, tracking: Tracking, settings: Settings, start_worker: StartWorker
) -> None:
    started = threading.Event()
    steps: list[str] = []

    @asynctask.job(registry=registry)
    async def sweep(chunk: list[int]) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            steps.append("cancelled")
            # Longer than the checks between two cancels: a second cancel would cut it short.
            await asyncio.sleep(1.5)
            steps.append("cleaned up")
            raise

    task = tracking.create_task(sweep, [1], chunk_size=1)
    start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")
    assert started.wait(10)
    tracking.cancel_task(task.id)
    # The job's end, cut short or not.
    wait_until(lambda: Stats(settings=settings).processed == 1, 15)
    assert steps == ["cancelled", "cleaned up"]
