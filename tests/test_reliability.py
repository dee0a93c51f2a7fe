"""Never lose a job: kill -9 at random moments, TERM during a long job, recovery by a live process."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.worker import Worker
from tests.conftest import wait_until
from tests.processes import Sessions, worker_argv

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs" / "crash_jobs.py"


@pytest.fixture
def spawn(redis_settings: Settings) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``asynctask worker`` subprocesses; any still running at teardown are killed."""
    sessions = Sessions()

    def start(concurrency: int = 5, timeout: float = 5.0) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "ASYNCTASK_REDIS_URL": redis_settings.redis_url,
            "ASYNCTASK_NAMESPACE": redis_settings.namespace,
            "ASYNCTASK_HEARTBEAT_INTERVAL": str(redis_settings.heartbeat_interval),
            "ASYNCTASK_PROCESS_TTL": str(redis_settings.process_ttl),
            "ASYNCTASK_SCHEDULED_POLL_INTERVAL": str(redis_settings.scheduled_poll_interval),
        }
        return sessions.start(worker_argv(JOBS, "-c", str(concurrency), "-t", str(timeout)), env, ROOT)

    yield start
    sessions.kill()


def inflight_jobs(conn: redis.Redis, namespace: str) -> int:
    return sum(int(conn.llen(key)) for key in conn.scan_iter(match=f"{namespace}:asynctask:inflight|*"))


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_no_job(
    redis_client: Client,
    conn: redis.Redis,
    namespace: str,
    redis_settings: Settings,
    spawn: Callable[..., subprocess.Popen[bytes]],
) -> None:
    jids = redis_client.push_bulk({"class": "record_jid", "args": [[8]] * 5000})
    done = f"{namespace}:test:done"
    rng = random.Random()
    kills_with_jobs_in_flight = 0
    for _ in range(3):
        worker = spawn()
        time.sleep(rng.uniform(0.8, 2.0))
        in_flight = inflight_jobs(conn, namespace)
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        kills_with_jobs_in_flight += in_flight > 0
    assert conn.scard(done) < 5000, "the kills came too late to test anything"
    assert kills_with_jobs_in_flight >= 2
    final = spawn()
    wait_until(lambda: conn.scard(done) == 5000, timeout=120, interval=0.2)
    assert {j.decode() for j in conn.smembers(done)} == set(jids)
    # A worker killed between jobs holds an empty in-flight list: the final worker forgets it
    # once its record expires (process_ttl), which a quick drain may not have lasted.
    registry = redis_client.keys.inflight_registry
    wait_until(lambda: conn.hlen(registry) <= 1, timeout=redis_settings.process_ttl * 4, interval=0.2)
    os.killpg(final.pid, signal.SIGTERM)
    assert final.wait(15) == 0
    assert conn.llen(redis_client.keys.queue("default")) == 0
    assert inflight_jobs(conn, namespace) == 0
    assert conn.hlen(registry) == 0


def test_term_during_a_long_job_requeues_it_within_the_timeout(
    redis_client: Client, conn: redis.Redis, namespace: str, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    jid = redis_client.push({"class": "long_job", "args": [60]})
    worker = spawn(timeout=2)
    wait_until(lambda: conn.llen(f"{namespace}:test:started") == 1, timeout=15)
    [original] = [
        raw
        for key in conn.scan_iter(match=f"{namespace}:asynctask:inflight|*")
        for raw in conn.lrange(key, 0, -1)
    ]
    started = time.monotonic()
    os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait(15) == 0
    assert time.monotonic() - started < 2 + 3 + 1.5
    assert conn.lrange(redis_client.keys.queue("default"), 0, -1) == [original]
    assert jid in original.decode()
    assert inflight_jobs(conn, namespace) == 0


def test_a_live_process_recovers_the_jobs_of_a_dead_one(
    registry: Registry,
    redis_client: Client,
    conn: redis.Redis,
    namespace: str,
    spawn: Callable[..., subprocess.Popen[bytes]],
    start_redis_worker: Callable[..., Worker],
) -> None:
    finished: list[str] = []

    @asynctask.job(registry=registry, name="long_job")
    def long_job(seconds: float) -> None:
        finished.append(asynctask.current_job().jid)

    jid = redis_client.push({"class": "long_job", "args": [60]})
    doomed = spawn()
    wait_until(lambda: conn.llen(f"{namespace}:test:started") == 1, timeout=15)
    survivor = start_redis_worker()
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    killed_at = time.monotonic()
    # The dead process's hash expires after process_ttl (3 s here; 60 s by default).
    wait_until(lambda: finished == [jid], timeout=15)
    assert time.monotonic() - killed_at >= 2
    # The dead process's lists were unregistered; only the survivor's remain.
    assert {owner.decode() for owner in conn.hvals(redis_client.keys.inflight_registry)} == {
        survivor.identity
    }
    assert inflight_jobs(conn, namespace) == 0
