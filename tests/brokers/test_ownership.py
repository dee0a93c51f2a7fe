"""Claims that heal: a claim no thread holds goes back to its queue, a thread's death loses
no job, and a process that only looked dead makes its claims recoverable again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.api import Queue
from asynctask.brokers import Fetcher
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.sql import SqlBroker
from asynctask.middleware import Chain
from asynctask.worker import Worker
from tests.conftest import wait_until


@pytest.fixture
def make_worker(settings: Settings, registry: Registry) -> Iterator[Any]:
    """Build a worker without starting it (so a test can act on its broker first); ``run``
    starts it in a thread. All are stopped after the test."""
    running: list[tuple[Worker, threading.Thread]] = []

    def make(**changes: Any) -> Worker:
        """``changes``: settings of this worker that differ from the test's."""
        own = replace(settings, **changes)
        return Worker(own, registry=registry, server_middleware=Chain(), client_middleware=Chain())

    def run(worker: Worker) -> None:
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
        thread.start()
        running.append((worker, thread))

    make.run = run  # type: ignore[attr-defined]
    yield make
    for worker, thread in running:
        worker.stop()
        thread.join(30)


def test_a_claim_whose_reply_was_lost_goes_back_to_its_queue_and_runs(
    registry: Registry, client: Client, settings: Settings, make_worker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[str] = []

    @asynctask.job(registry=registry)
    def note(label: str) -> None:
        runs.append(label)

    # A record that outlives any stall of a loaded machine: had it expired, the worker's own
    # orphan recovery would take the claim back first, without the give-back this is about.
    # Idle threads wait for jobs four heartbeats at a time, so that some round trip is always
    # under way across a heartbeat.
    worker = make_worker(process_ttl=60, fetch_timeout=4 * settings.heartbeat_interval)
    note.set(client=client).perform_async("lost")
    # The claim happens in the store, but its answer never reaches a thread: as when the
    # connection dropped after the server ran it.
    assert len(worker.fetch.claim(1, [], [])) == 1
    assert Queue("default", settings=settings).size == 0
    with caplog.at_level(logging.WARNING, logger="asynctask.fetch"):
        # Captured from the worker's start: a heartbeat may come as soon as it runs.
        make_worker.run(worker)
        # Two heartbeats see it unheld, with the round trips under way at the first (a watching
        # thread's: up to twice the fetch timeout) returned in between; and a slow machine.
        wait_until(lambda: runs == ["lost"], timeout=11 * settings.heartbeat_interval + 3)
        wait_until(lambda: not worker.fetch.held())
        # The give-back is logged after the requeue, which a loaded machine may see run the job
        # and empty the claims first.
        wait_until(lambda: any("gave back 1 claimed job" in r.getMessage() for r in caplog.records))
    assert any("gave back 1 claimed job" in r.getMessage() for r in caplog.records)
    assert runs == ["lost"]


def fetcher_with_a_job(registry: Registry, client: Client, identity: str) -> Fetcher:
    """A registered fetcher of process ``identity``, not running, and one job in its queue."""

    @asynctask.job(registry=registry)
    def note() -> None:
        pass

    fetcher = client.broker.fetcher(identity)
    fetcher.register()
    note.set(client=client).perform_async()
    return fetcher


def test_a_claim_is_given_back_only_once_every_round_trip_under_way_when_first_seen_returned(
    registry: Registry, client: Client, settings: Settings
) -> None:
    """Round trips overlap across every check (as threads blocked waiting for jobs keep them
    under way): the claim goes back as soon as those under way when it was first seen unheld
    have all returned, however many started since."""

    fetcher = fetcher_with_a_job(registry, client, "round-trips")
    # Round trips a to d, each started before the one before it returns.
    with ExitStack() as a, ExitStack() as b, ExitStack() as c, ExitStack() as d:
        a.enter_context(fetcher._round_trip([]))
        b.enter_context(fetcher._round_trip([]))
        # The claim's reply may still be on its way in a or b, as far as the checks can tell.
        assert len(fetcher.claim(1, [], [])) == 1
        assert fetcher.reconcile() == 0
        c.enter_context(fetcher._round_trip([]))
        a.close()
        assert fetcher.reconcile() == 0, "b, under way at the first check, has not returned"
        d.enter_context(fetcher._round_trip([]))
        b.close()
        assert fetcher.reconcile() == 1
    assert Queue("default", settings=settings).size == 1
    assert fetcher.held() == []


def test_a_suspect_claim_that_a_thread_then_holds_stays_with_it(
    registry: Registry, client: Client, settings: Settings
) -> None:
    fetcher = fetcher_with_a_job(registry, client, "taken-later")
    [unit] = fetcher.claim(1, [], [])
    assert fetcher.reconcile() == 0
    # Between two checks the job reaches a thread (here: given back, then fetched again).
    assert fetcher.requeue([unit]) == 1
    assert fetcher.fetch(None, 0) == unit
    assert fetcher.reconcile() == 0
    assert fetcher.reconcile() == 0
    assert fetcher.held() == [unit]


def test_the_job_of_a_thread_that_died_goes_back_to_its_queue(
    registry: Registry, client: Client, settings: Settings, start_worker: Any
) -> None:
    runs: list[int] = []

    @asynctask.job(registry=registry)
    def dies_once() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            # Escapes every handler of a job's errors: the processor thread itself dies.
            raise KeyboardInterrupt

    worker = start_worker()
    dies_once.set(client=client).perform_async()
    wait_until(lambda: len(runs) == 2, timeout=5 * settings.heartbeat_interval + 3)
    wait_until(lambda: not worker.fetch.held())
    wait_until(lambda: worker.manager.busy == 0 and len(worker.manager._processors) == settings.concurrency)
    assert runs == [0, 1]


def forget_process(worker: Worker) -> None:
    """What a peer's recovery does to a process whose record expired: the record is gone and
    (on Redis) its in-flight lists are unregistered."""
    broker = worker.broker
    if isinstance(broker, RedisBroker):
        conn = broker.redis
        conn.delete(broker.keys.process(worker.identity))
        for key, owner in conn.hgetall(broker.keys.inflight_registry).items():
            if owner.decode() == worker.identity:
                conn.hdel(broker.keys.inflight_registry, key)
    else:
        assert isinstance(broker, SqlBroker)
        with broker.engine.begin() as connection:
            connection.execute(
                text("DELETE FROM asynctask_process WHERE identity = :identity"),
                {"identity": worker.identity},
            )


def test_a_process_that_only_looked_dead_says_so_and_is_recoverable_again(
    registry: Registry,
    client: Client,
    settings: Settings,
    make_worker: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    starts: list[float] = []
    release = threading.Event()

    @asynctask.job(registry=registry)
    def long_job() -> None:
        starts.append(time.monotonic())
        release.wait(30)

    worker = make_worker()
    make_worker.run(worker)
    long_job.set(client=client).perform_async()
    wait_until(lambda: starts)
    with caplog.at_level(logging.WARNING, logger="asynctask.heartbeat"):
        forget_process(worker)
        wait_until(lambda: any("record had expired" in r.getMessage() for r in caplog.records), timeout=10)
    # Then its heartbeat stops for good, as if it died: once its record expires, a live
    # process must find the job, though a peer's recovery had unregistered its claims.
    worker.beat_once = lambda: None
    peer = RedisBroker(settings) if settings.uses_redis else SqlBroker(settings)
    try:
        wait_until(lambda: peer.recover_orphans("peer") == 1, timeout=settings.process_ttl + 5)
        # Back in its queue, where the (not really dead) process's free threads take it again.
        wait_until(lambda: len(starts) == 2)
    finally:
        release.set()
        peer.close()
