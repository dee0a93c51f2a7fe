"""Worker processes on every backend: heartbeats, busy work, stats, remote and OS signals,
graceful shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import asynctask
from asynctask import Client, QueueSpec, Registry, Settings, payload
from asynctask.api import ProcessSet, Queue, Stats, WorkSet
from asynctask.brokers import open_broker
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.worker import Worker
from tests.brokers.conftest import SpawnWorker, read_runs
from tests.conftest import started_threads, wait_for_beats, wait_until

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

StartWorker = Callable[..., Worker]


def test_the_heartbeat_shows_the_process_its_busy_threads_and_what_they_run(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    release = threading.Event()

    @asynctask.job(registry=registry, queue="slow")
    def slow(seconds: float) -> None:
        release.wait(seconds)

    worker = start_worker(
        tag="billing", labels=("blue", "green"), queues=(QueueSpec("slow"), QueueSpec("default"))
    )
    processes = ProcessSet(settings=settings)
    [process] = list(processes)
    assert process.identity == worker.identity
    assert (process.hostname, process.pid) == (worker.info.hostname, os.getpid())
    assert (process.tag, process.labels, process.concurrency) == ("billing", ["blue", "green"], 4)
    assert (process.queues, process.busy, process.is_quiet) == (["slow", "default"], 0, False)
    assert process.beat is not None and abs(payload.now() - process.beat) < 5
    assert process.started_at == worker.info.started_at
    assert process.rss > 0 and (process.version or "").startswith("asynctask-")

    started = payload.now()
    jid = slow.set(client=client).perform_async(30)
    work = WorkSet(settings=settings)
    try:
        wait_until(lambda: [p.busy for p in processes] == [1])
        [busy] = wait_until(lambda: list(work))
        assert (busy.identity, busy.queue, busy.jid) == (worker.identity, "slow", jid)
        assert busy.job.klass == "slow" and busy.job.args == [30]
        assert busy.run_at is not None and int(started) <= busy.run_at <= payload.now()
        assert work.find(jid) == busy and work.size == 1
    finally:
        release.set()
    wait_until(lambda: [p.busy for p in processes] == [0] and work.size == 0)

    worker.stop()
    wait_until(lambda: processes.size == 0)
    assert list(processes) == []


def test_stats_count_processed_and_failed_per_day(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    @asynctask.job(registry=registry, retry=False)
    def maybe(fail: bool) -> None:
        if fail:
            raise ValueError("x")

    maybe.set(client=client).perform_bulk([[False]] * 5 + [[True]] * 2)
    maybe.set(client=client, queue="elsewhere").perform_bulk([[False]] * 3)
    stats = Stats(settings=settings)
    start_worker()
    wait_until(lambda: (stats.refresh().processed, stats.failed) == (7, 2))
    assert (stats.enqueued, stats.queues.get("elsewhere"), stats.processes_size) == (3, 3, 1)
    today = datetime.now(UTC).date()
    history = stats.history(days=2)
    assert history.processed == {today: 7, today - timedelta(days=1): 0}
    assert history.failed == {today: 2, today - timedelta(days=1): 0}


def test_remote_signals_dump_threads_quiet_then_stop_the_worker(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    ran: list[int] = []
    logged: list[str] = []

    @asynctask.job(registry=registry)
    def work(n: int) -> None:
        ran.append(n)

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    start_worker()
    processes = ProcessSet(settings=settings)
    [process] = list(processes)
    handler = Collect(logging.WARNING)
    logger = logging.getLogger("asynctask.worker")
    logger.addHandler(handler)
    try:
        process.dump_threads()
        wait_until(lambda: any(m.startswith("thread asynctask-heartbeat") for m in logged))
    finally:
        logger.removeHandler(handler)
    process.quiet()
    wait_until(lambda: [p.is_quiet for p in processes] == [True])
    jid = work.set(client=client).perform_async(1)
    wait_for_beats(lambda: getattr(processes.get(process.identity), "beat", None))
    queue = Queue("default", settings=settings)
    assert ran == [] and queue.size == 1
    process.stop()
    wait_until(lambda: processes.size == 0)
    assert ran == [] and [record.jid for record in queue] == [jid]


def test_going_quiet_releases_the_threads_waiting_for_jobs(settings: Settings) -> None:
    """A worker told to stop does not wait out the fetch timeout of its idle threads."""
    broker = open_broker(dataclasses.replace(settings, fetch_timeout=10.0))
    try:
        fetcher = broker.fetcher("me")
        got: list[UnitOfWork | None] = []
        waiting = started_threads(lambda: got.append(fetcher.fetch(None, 0)), 3)
        time.sleep(0.5)
        started = time.monotonic()
        fetcher.interrupt()
        for thread in waiting:
            thread.join(10)
        assert time.monotonic() - started < 2
        assert got == [None, None, None]
    finally:
        broker.close()


def test_no_thread_waits_for_jobs_once_the_process_went_quiet(settings: Settings) -> None:
    """A thread that comes to wait just after the interrupt (it was finishing a claim) returns
    at once too: a worker stopped right after a burst does not wait out the fetch timeout."""
    broker = open_broker(dataclasses.replace(settings, fetch_timeout=10.0))
    try:
        fetcher = broker.fetcher("me")
        fetcher.interrupt()
        started = time.monotonic()
        assert fetcher.fetch(None, 0) is None
        assert time.monotonic() - started < 2
    finally:
        broker.close()


def test_tstp_quiets_and_term_stops_a_worker_process(
    client: Client, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    proc = spawn_worker(timeout=1.0)
    processes = ProcessSet(settings=settings)
    [process] = wait_until(lambda: list(processes), timeout=15)
    assert process.pid == proc.pid
    long_jid = client.push({"class": "record_slowly", "args": [60]})
    wait_until(lambda: [run.event for run in read_runs(runs_file)] == ["start"], timeout=10)

    os.kill(proc.pid, signal.SIGTSTP)
    wait_until(lambda: [p.is_quiet for p in processes] == [True])
    quick_jid = client.push({"class": "record", "args": [0]})
    wait_for_beats(lambda: getattr(processes.get(process.identity), "beat", None))
    queue = Queue("default", settings=settings)
    assert queue.size == 1

    stopping = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(15) == 0
    # -t 1: the long job is interrupted after a second and pushed back to its queue.
    assert time.monotonic() - stopping < 1 + 4
    assert sorted(str(record.jid) for record in queue) == sorted([str(long_jid), str(quick_jid)])
    assert [(run.event, run.jid) for run in read_runs(runs_file)] == [("start", long_jid)]
    assert processes.size == 0


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_shutdown_pushes_back_jobs_running_at_the_timeout_and_they_run_again(
    kind: str, registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    """A sync job gets ``Shutdown`` at the timeout, an async one ``CancelledError`` at its next
    await: either way it is pushed back, and runs again."""
    finish = threading.Event()
    interrupted: list[str] = []
    completed: list[str] = []

    if kind == "sync":

        @asynctask.job(registry=registry)
        def hold(n: int) -> None:
            jid = asynctask.current_job().jid
            try:
                while not finish.is_set():
                    time.sleep(0.01)
            except asynctask.Shutdown:
                interrupted.append(jid)
                raise
            completed.append(jid)

    else:

        @asynctask.job(registry=registry, name="hold")
        async def async_hold(n: int) -> None:
            jid = asynctask.current_job().jid
            try:
                while not finish.is_set():
                    await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                interrupted.append(jid)
                raise
            completed.append(jid)

    jids = client.push_bulk({"class": "hold", "args": [[n] for n in range(6)]})
    worker = start_worker(concurrency=3, async_concurrency=3, timeout=0.5)
    processes = ProcessSet(settings=settings)
    wait_until(lambda: [p.busy for p in processes] == [3])
    stopping = time.monotonic()
    worker.stop()
    wait_until(lambda: processes.size == 0)
    assert time.monotonic() - stopping < 0.5 + 3
    assert len(set(interrupted)) == 3 and set(interrupted) <= set(jids) and completed == []
    queue = Queue("default", settings=settings)
    assert sorted(str(record.jid) for record in queue) == sorted(jids)

    finish.set()
    start_worker()
    wait_until(lambda: sorted(completed) == sorted(jids))
    wait_until(lambda: queue.size == 0)
    assert sorted(completed) == sorted(jids)  # each once
