"""The flusher child process: started with a worker given a tracking database, or else when there
is something to flush; restarted when it dies, gone when its worker is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import psutil
import pytest
import redis
from sqlalchemy import select
from sqlalchemy.engine import make_url

from asynctask import Client, Settings, Tracking, job
from asynctask.api import ProcessSet
from asynctask.db import migrate
from asynctask.db.engine import create_database_engine
from asynctask.keys import Keys
from asynctask.middleware import Chain, TrackingClientMiddleware
from asynctask.registry import Registry
from asynctask.tracking.models import Event, Task
from tests.conftest import POSTGRES_URL, fresh_postgres_schema, wait_for_beats, wait_until

ROOT = Path(__file__).resolve().parents[2]
POSTGRES_PORT = make_url(POSTGRES_URL).port or 5432


def flusher_children(worker: subprocess.Popen[bytes]) -> list[psutil.Process]:
    found = []
    # The worker's children: its watchdog and the flusher.
    for child in psutil.Process(worker.pid).children(recursive=True):
        try:
            if "flusher" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue  # gone or a zombie between listing and looking: not a live flusher
    return found


def start_worker(
    settings: Settings, cwd: Path, log: BinaryIO | None = None, **env: str
) -> subprocess.Popen[bytes]:
    """``asynctask worker`` with ``env`` (no tracking database named unless it names one)."""
    inherited = {k: v for k, v in os.environ.items() if k != "ASYNCTASK_DATABASE_URL"}
    environment = {
        **inherited,
        "ASYNCTASK_REDIS_URL": settings.redis_url,
        "ASYNCTASK_NAMESPACE": settings.namespace,
        "ASYNCTASK_HEARTBEAT_INTERVAL": "0.5",
        "ASYNCTASK_PROCESS_TTL": "3",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "asynctask", "worker", "-c", "2"],
        env=environment,
        cwd=cwd,
        start_new_session=True,
        stderr=log,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.fixture
def worker(redis_settings: Settings, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    # The default database (a file in the working directory): the worker may never track.
    proc = start_worker(redis_settings, tmp_path)
    # Such a worker starts its flusher only once there is something to flush: not at its
    # start, nor at a heartbeat that finds the tracking stream empty.
    processes = ProcessSet(settings=redis_settings)
    [process] = wait_until(lambda: list(processes), timeout=15)
    wait_for_beats(lambda: getattr(processes.get(process.identity), "beat", None))
    assert not flusher_children(proc)
    tracked = Client(redis_settings, middleware=Chain([TrackingClientMiddleware()]))
    tracked.push({"class": "Elsewhere", "args": [], "queue": "nobody-reads-this", "track": True})
    tracked.broker.close()
    yield proc
    stop(proc)


def test_a_dead_flusher_is_restarted_and_a_killed_worker_takes_its_flusher_along(
    worker: subprocess.Popen[bytes],
) -> None:
    (first,) = wait_until(lambda: flusher_children(worker), timeout=15)
    first.kill()
    (second,) = wait_until(lambda: [c for c in flusher_children(worker) if c.pid != first.pid], timeout=10)
    worker.kill()
    worker.wait(10)
    second.wait(5)
    assert not second.is_running()


def test_term_stops_the_worker_and_its_flusher_cleanly(worker: subprocess.Popen[bytes]) -> None:
    (child,) = wait_until(lambda: flusher_children(worker), timeout=15)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(20) == 0
    # Not our child, so psutil cannot tell its exit code; the worker waited for it to exit.
    child.wait(5)
    assert not child.is_running()


def test_a_worker_given_a_tracking_database_starts_its_flusher_with_it(
    redis_settings: Settings, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'tracking.db'}"
    migrate.upgrade(database)
    proc = start_worker(redis_settings, tmp_path, ASYNCTASK_DATABASE_URL=database)
    try:
        # Nothing tracked, nothing in the stream: the child is there to be ready when it is.
        wait_until(lambda: flusher_children(proc), timeout=15)
    finally:
        stop(proc)


def test_a_flusher_waits_for_a_database_that_does_not_exist_yet_then_applies(
    redis_settings: Settings, tmp_path: Path, conn: redis.Redis
) -> None:
    database = f"sqlite:///{tmp_path / 'tracking.db'}"
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = start_worker(redis_settings, tmp_path, out, ASYNCTASK_DATABASE_URL=database)
    try:
        wait_until(lambda: flusher_children(proc), timeout=15)
        tracked = Client(redis_settings, middleware=Chain([TrackingClientMiddleware()]))
        jid = tracked.push({"class": "Elsewhere", "args": [], "queue": "nobody-reads-this", "track": True})
        tracked.broker.close()
        stream = Keys(redis_settings.namespace).tracking_stream
        # The database is made only once the flusher has found it missing: made sooner, a
        # flusher slow to start would find it half made instead.
        wait_until(lambda: "does not exist" in log.read_text(), timeout=15)
        assert conn.xlen(stream) == 1 and flusher_children(proc)
        migrate.upgrade(database)
        engine = create_database_engine(database)
        try:
            query = select(Event.status).where(Event.job_id == jid)

            def applied() -> bool:
                with engine.connect() as connection:
                    return connection.execute(query).scalar() == "enqueue"

            wait_until(applied, timeout=15)
        finally:
            engine.dispose()
        # The entry is deleted after the commit that made the row visible.
        wait_until(lambda: conn.xlen(stream) == 0, timeout=5)
    finally:
        stop(proc)
    # Said once, by a flusher that waited, rather than by every flusher restarted meanwhile.
    assert log.read_text().count("does not exist") == 1


def database_connections(process: psutil.Process) -> int:
    return sum(1 for c in process.net_connections("tcp") if c.raddr and c.raddr.port == POSTGRES_PORT)


def test_a_flusher_on_postgresql_applies_a_large_batch_on_several_connections_then_keeps_one(
    redis_settings: Settings, tmp_path: Path, conn: redis.Redis, registry: Registry
) -> None:
    @job(registry=registry, queue="nobody-reads-this")
    def noop(items: list[int]) -> None:
        pass

    with fresh_postgres_schema() as database:
        migrate.upgrade(database)
        engine = create_database_engine(database)
        try:
            tracking = Tracking(Client(redis_settings, registry=registry), engine)
            task = tracking.create_task(noop, range(1000), chunk_size=1)
            jids = [e.job_id for e in tracking.list_events(task.id, limit=1000).items]
            stream = Keys(redis_settings.namespace).tracking_stream
            # Entries of fifty jobs' starts and ends, as a busy worker writes them: batches
            # large enough to be applied in parts.
            for start in range(0, 1000, 50):
                chunk = ",".join(
                    f'["{jid}","{kind}",1.0]'
                    for jid in jids[start : start + 50]
                    for kind in ("working", "finish")
                )
                conn.xadd(stream, {"s": 1 + 2 * start, "d": f"[{chunk}]"})
            # Every part of the batch ends by updating the task's counts: while this transaction
            # holds the task's row, each part waits there on its own connection, long enough to be
            # counted (unheld, the parts are over within milliseconds, between two looks).
            with engine.connect() as holder:
                holder.execute(select(Task.id).where(Task.id == task.id).with_for_update())
                proc = start_worker(redis_settings, tmp_path, ASYNCTASK_DATABASE_URL=database)
                try:
                    (flusher,) = wait_until(lambda: flusher_children(proc), timeout=15)
                    wait_until(lambda: database_connections(flusher) >= 2, timeout=30)
                    holder.rollback()
                    wait_until(lambda: conn.xlen(stream) == 0, timeout=30)
                    # The connections opened for the parts are closed once they are given back.
                    wait_until(lambda: database_connections(flusher) == 1, timeout=10)
                finally:
                    stop(proc)
            assert tracking.get_task(task.id).counts["finish"] == 1000
        finally:
            engine.dispose()
