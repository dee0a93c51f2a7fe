"""The flusher child process: started when there is something to flush, restarted when it dies,
gone when its worker is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from asynctask import Client, Settings
from asynctask.api import ProcessSet
from asynctask.middleware import Chain, TrackingClientMiddleware
from tests.conftest import wait_for_beats, wait_until

ROOT = Path(__file__).resolve().parents[2]


def flusher_children(worker: subprocess.Popen[bytes]) -> list[psutil.Process]:
    found = []
    # The worker runs in a child of the process started (its supervisor): the flusher is below.
    for child in psutil.Process(worker.pid).children(recursive=True):
        try:
            if "flusher" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue  # gone or a zombie between listing and looking: not a live flusher
    return found


@pytest.fixture
def worker(settings: Settings, tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ASYNCTASK_REDIS_URL": settings.redis_url,
        "ASYNCTASK_NAMESPACE": settings.namespace,
        "ASYNCTASK_DATABASE_URL": f"sqlite:///{tmp_path / 'tracking.db'}",
        "ASYNCTASK_HEARTBEAT_INTERVAL": "0.5",
        "ASYNCTASK_PROCESS_TTL": "3",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "asynctask", "worker", "-c", "2"], env=env, cwd=ROOT, start_new_session=True
    )
    # A worker starts its flusher only once there is something to flush: not at its start,
    # nor at a heartbeat that finds the tracking stream empty.
    processes = ProcessSet(settings=settings)
    [process] = wait_until(lambda: list(processes), timeout=15)
    wait_for_beats(lambda: getattr(processes.get(process.identity), "beat", None))
    assert not flusher_children(proc)
    tracked = Client(settings, middleware=Chain([TrackingClientMiddleware()]))
    tracked.push({"class": "Elsewhere", "args": [], "queue": "nobody-reads-this", "track": True})
    tracked.broker.close()
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


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
