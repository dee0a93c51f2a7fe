"""Unique jobs on every backend: concurrent pushes of one job make exactly one, every push
returns its jid, and the key is free again once the job is done (or, with
``unique_until="start"``, once a worker claimed it)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from asynctask import Settings
from asynctask.api import Queue
from asynctask.job import JobDefinition
from tests.brokers.conftest import MakeClient, SpawnWorker
from tests.brokers.flow.support import done_jids, flow_client, read_events, start_flow_workers
from tests.conftest import wait_until
from tests.jobs.flow_jobs import unique_step, unique_until_start_step

PUSHES = 200
THREADS = 8
#: Long enough to push again while the job runs.
RUN_SECONDS = 1.0


def push_concurrently(job: JobDefinition[...], make_client: MakeClient) -> list[str]:
    """PUSHES pushes of one job (same arguments) from THREADS threads, each with its own client."""
    clients = [flow_client(make_client) for _ in range(THREADS)]

    def push(index: int) -> str:
        return job.set(client=clients[index % THREADS]).perform_async("same", 0, RUN_SECONDS)

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(push, range(PUSHES)))


def pushed_once(job: JobDefinition[...], make_client: MakeClient, settings: Settings) -> str:
    """The jid of the one job ``push_concurrently``'s pushes made, alone in its queue, which
    every push returned."""
    jids = push_concurrently(job, make_client)
    queue = Queue("default", settings=settings)
    assert queue.size == 1
    [holder] = [queued.jid for queued in queue]
    assert set(jids) == {holder}
    return holder


def pusher(job: JobDefinition[...], make_client: MakeClient) -> Callable[[], str]:
    client = flow_client(make_client)
    return lambda: job.set(client=client).perform_async("same", 0, RUN_SECONDS)


def test_concurrent_pushes_make_one_job_until_it_is_done(
    make_client: MakeClient, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    holder = pushed_once(unique_step, make_client, settings)
    queue = Queue("default", settings=settings)

    push = pusher(unique_step, make_client)
    start_flow_workers(spawn_worker, settings, processes=1, concurrency=2)
    wait_until(lambda: any(e.event == "start" for e in read_events(runs_file)), timeout=15)
    # Running is still held: nothing new is pushed.
    assert push() == holder
    assert holder not in done_jids(runs_file) and queue.size == 0

    # Done (and acknowledged, which the worker does right after): a push makes a new job.
    wait_until(lambda: holder in done_jids(runs_file), timeout=15)
    successor = wait_until(lambda: (jid := push()) != holder and jid, timeout=10)
    wait_until(lambda: successor in done_jids(runs_file), timeout=15)
    assert [e.jid for e in read_events(runs_file) if e.event == "start"] == [holder, successor]


def test_with_unique_until_start_a_claimed_job_no_longer_holds_its_key(
    make_client: MakeClient, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    holder = pushed_once(unique_until_start_step, make_client, settings)

    push = pusher(unique_until_start_step, make_client)
    # One thread: busy with the first job, it leaves the next one queued (unclaimed) meanwhile.
    start_flow_workers(spawn_worker, settings, processes=1, concurrency=1)
    wait_until(lambda: any(e.event == "start" for e in read_events(runs_file)), timeout=15)
    # Claimed: the next push makes a new job while the first still runs...
    successor = push()
    assert successor != holder and holder not in done_jids(runs_file)
    # ... which holds the key in turn.
    assert push() == successor
    wait_until(lambda: done_jids(runs_file) >= {holder, successor}, timeout=15)
    assert sorted(e.jid for e in read_events(runs_file) if e.event == "start") == sorted([holder, successor])
