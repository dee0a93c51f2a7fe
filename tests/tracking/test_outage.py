"""The tracking pipeline through a database outage: stop PostgreSQL while a task
runs, bring it back, and every job has run once or more and every event ends in its right state.

The database is a private PostgreSQL server (``tests/pg_instance.py``) because the test kills
it; jobs run in real worker subprocesses (``asynctask worker``), whose flushers must survive the
outage, keep the transitions in Redis, and apply them all once SQL is back.

After the outage every flusher retries the batch it holds, so a job's transitions can reach
SQL out of order (its ``finish`` committed by one flusher before its ``working`` by another);
the last test pins that case down deterministically.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

import asynctask

# Imported for its tables: they join Base.metadata, which create_all creates.
import asynctask.tracking.models
from asynctask import Client, EventStatus, Registry, Settings, Tracking
from asynctask.brokers.redis.flusher import GROUP
from asynctask.db.base import Base
from asynctask.db.engine import create_database_engine, writer
from asynctask.tracking.apply import apply_transitions
from asynctask.tracking.transitions import Transition
from tests.conftest import wait_until
from tests.jobs import outage_jobs
from tests.pg_instance import PrivatePostgres
from tests.tracking_fixtures import wait_for_task

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "jobs" / "outage_jobs.py"

KINDS = {"ok": 340, "fail": 40, "boom": 20}
WORKERS = 2
CONCURRENCY = 5
#: Milliseconds each job sleeps: 400 jobs on 10 threads then take about 8 s, so that jobs start
#: and finish before, throughout and after the outage.
PAUSE_MS = (100, 300)
#: Runs seen before the database is stopped (the task is under way, with plenty left to do).
RUNS_BEFORE_OUTAGE = 30
#: Seconds the database stays down: long enough for the flushers' backoff to grow (0.2 s,
#: doubling) and for their batches to fail several times.
OUTAGE_SECONDS = 5.0
#: What the flusher logs for a batch SQL refused (``asynctask.brokers.redis.flusher``).
FLUSH_FAILED = "tracking entries failed"


def expected_log(kind: str, n: int) -> list[tuple[str, str]]:
    """(status, text) of every message item ``n``'s event must end with, oldest first."""
    return {
        "ok": [("working", "started"), ("finish", "finished")],
        "fail": [("working", "started"), ("failed", f"item {n} rejected")],
        "boom": [
            ("working", "started"),
            ("error", f"RuntimeError: item {n} exploded"),
            ("enqueue", "waiting for retry 1 of 1"),
            ("working", "started"),
            ("finish", "finished"),
        ],
    }[kind]


FINAL = {"ok": "finish", "fail": "failed", "boom": "finish"}
RUNS = {"ok": 1, "fail": 1, "boom": 2}


def total_runs(conn: redis.Redis, counts_key: str) -> int:
    return sum(int(count) for count in conn.hvals(counts_key))


@pytest.fixture
def private_engine(postgres_server: PrivatePostgres) -> Iterator[Engine]:
    engine = create_database_engine(postgres_server.url)
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def spawn(
    redis_settings: Settings, postgres_server: PrivatePostgres, tmp_path: Path
) -> Iterator[Callable[[str], tuple[subprocess.Popen[bytes], Path]]]:
    """Start worker subprocesses (stderr kept in a file); any still running at teardown are killed."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(runs_key: str) -> tuple[subprocess.Popen[bytes], Path]:
        env = {
            **os.environ,
            "ASYNCTASK_REDIS_URL": redis_settings.redis_url,
            "ASYNCTASK_NAMESPACE": redis_settings.namespace,
            "ASYNCTASK_DATABASE_URL": postgres_server.url,
            "ASYNCTASK_HEARTBEAT_INTERVAL": "0.5",
            "ASYNCTASK_PROCESS_TTL": "3",
            "ASYNCTASK_SCHEDULED_POLL_INTERVAL": "0.2",
            "OUTAGE_TEST_RUNS_KEY": runs_key,
        }
        command = [sys.executable, "-m", "asynctask", "worker", "-r", str(JOBS)]
        command += ["-c", str(CONCURRENCY), "-t", "5"]
        log = tmp_path / f"worker-{len(procs)}.stderr"
        # A file, not a pipe: nobody reads stderr while the test runs, and a full pipe would block.
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
            )
        procs.append(proc)
        return proc, log

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def test_jobs_survive_a_database_outage_and_every_event_ends_right(
    redis_client: Client,
    conn: redis.Redis,
    namespace: str,
    postgres_server: PrivatePostgres,
    private_engine: Engine,
    spawn: Callable[[str], tuple[subprocess.Popen[bytes], Path]],
) -> None:
    began = time.monotonic()
    tracking = Tracking(redis_client, private_engine)
    runs_key = f"{namespace}:test:outage-runs"
    counts_key = f"{runs_key}:count"
    stream = redis_client.keys.tracking_stream

    rng = random.Random(11)
    kinds = [kind for kind, n in KINDS.items() for _ in range(n)]
    rng.shuffle(kinds)
    items = [{"n": n, "kind": kind, "ms": rng.randint(*PAUSE_MS)} for n, kind in enumerate(kinds)]
    # The job's own definition (retry=1 and its retry_in), as the workers load it.
    task = tracking.create_task(outage_jobs.outage_chunk, items)
    assert task.total == len(items) and task.status == "pending"

    workers = [spawn(runs_key) for _ in range(WORKERS)]
    wait_until(lambda: conn.scard(runs_key) >= RUNS_BEFORE_OUTAGE, timeout=30, interval=0.01)
    # The flushers were applying transitions before the outage (so it interrupts a live pipeline).
    wait_until(lambda: tracking.get_task(task.id).counts["finish"] > 0, timeout=10, interval=0.02)

    postgres_server.stop("immediate")
    down_at = time.monotonic()
    runs_at_stop = conn.scard(runs_key)
    # The outage is real: the test's own reads fail too.
    with pytest.raises(OperationalError):
        tracking.get_task(task.id)
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
    runs_during = conn.scard(runs_key) - runs_at_stop
    backlog = conn.xlen(stream)
    assert all(proc.poll() is None for proc, _ in workers), "a worker died while SQL was down"
    postgres_server.start()
    up_at = time.monotonic()
    runs_at_restart = total_runs(conn, counts_key)

    # Jobs kept running without SQL, and their transitions waited in Redis.
    assert runs_during > 0, "no job ran while the database was down"
    assert backlog > 0, "nothing waited in the tracking stream during the outage"

    final = wait_for_task(tracking, task.id, timeout=90)
    settled_at = time.monotonic()
    # Some jobs (at least the retries) also ran after the restart, mixing new transitions
    # with the backlog.
    runs_after = total_runs(conn, counts_key) - runs_at_restart
    assert runs_after > 0, "every job had run before the database came back"
    # Every entry was applied and acknowledged: nothing is stuck in the stream.
    wait_until(lambda: conn.xlen(stream) == 0, timeout=15, interval=0.05)
    assert conn.xpending(stream, GROUP)["pending"] == 0

    exits = []
    for proc, _ in workers:
        assert proc.poll() is None, "a worker exited on its own"
        os.killpg(proc.pid, signal.SIGTERM)
    for proc, _ in workers:
        exits.append(proc.wait(30))
    assert exits == [0] * WORKERS
    logs = [path.read_text(errors="replace") for _, path in workers]
    for log in logs:
        assert FLUSH_FAILED in log, f"a worker did not report the SQL failure:\n{log[-3000:]}"
        assert "Traceback" not in log and "Exception in thread" not in log, log[-3000:]

    assert final.status == "finished_with_errors", final
    assert final.counts == {
        "enqueue": 0,
        "working": 0,
        "finish": KINDS["ok"] + KINDS["boom"],
        "failed": KINDS["fail"],
        "error": 0,
        "cancelled": 0,
        "stopped": 0,
        "lost": 0,
    }
    assert final.done == len(items) and final.progress == 1.0
    assert final.started_at is not None and final.finished_at is not None
    assert len(final.errors) == 10 and all(e.status == "failed" for e in final.errors)

    page = tracking.list_events(task.id, limit=1000)
    assert len(page.items) == len(items) and page.next_cursor is None
    runs = {jid.decode(): int(count) for jid, count in conn.hgetall(counts_key).items()}
    ran = {jid.decode() for jid in conn.smembers(runs_key)}
    assert ran == {event.job_id for event in page.items}, "some job never ran (or a stranger did)"
    miscounted = []
    for event in page.items:
        assert event.params is not None
        item: dict[str, Any] = event.params[0][0]
        kind, n = item["kind"], item["n"]
        log_ = [(m.status, m.text) for m in event.messages]
        assert event.status == FINAL[kind], (kind, n, event.status, log_)
        assert log_ == expected_log(kind, n), (kind, n, log_)
        assert runs[event.job_id] >= RUNS[kind], (kind, n, runs[event.job_id])
        if kind == "fail":
            assert event.error_class == "asynctask.JobFailed" and event.error == f"item {n} rejected"
        # Every run counts as an attempt, and a job that ran has a start time, whatever order
        # the flushers applied its transitions in.
        if event.attempt != runs[event.job_id] or event.started_at is None:
            miscounted.append((kind, n, event.attempt, runs[event.job_id], event.started_at))

    print(
        f"\noutage test: {len(items)} jobs; {runs_at_stop} ran before the outage, {runs_during} during "
        f"it ({up_at - down_at:.1f} s, {backlog} stream entries waiting) and {runs_after} runs after it; "
        f"task settled {settled_at - up_at:.1f} s after the restart; {time.monotonic() - began:.1f} s in all"
    )
    assert not miscounted, (
        f"{len(miscounted)} events lost a start (kind, n, attempt, runs, started_at): {miscounted[:10]}"
    )


def test_a_start_applied_after_the_finish_is_still_recorded(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    """After an outage every flusher retries its own batch, so one job's ``working`` (held by one
    flusher) can be committed after its ``finish`` (held by another). The late start must not
    change the status, but the job did start: its attempt and start time must be kept."""

    @asynctask.job(registry=registry, name="outage_order")
    def outage_order(items: list[int]) -> None:
        pass

    task = redis_tracking.create_task(outage_order, [1])
    [event] = redis_tracking.list_events(task.id).items
    at = time.time()
    working = Transition(event.job_id, EventStatus.WORKING.value, at, "started", seq=101)
    finish = Transition(event.job_id, EventStatus.FINISH.value, at + 0.5, "finished", seq=102)
    for batch in ([finish], [working]):
        with writer(database_engine).begin() as connection:
            apply_transitions(connection, batch)

    [event] = redis_tracking.list_events(task.id).items
    assert event.status == "finish"
    assert [(m.status, m.text) for m in event.messages] == [("working", "started"), ("finish", "finished")]
    assert event.attempt == 1
    assert event.finished_at == datetime.fromtimestamp(at + 0.5, UTC)
    assert event.started_at == datetime.fromtimestamp(at, UTC), "the late start's time was dropped"
    view = redis_tracking.get_task(task.id)
    assert view.status == "finished" and view.counts["finish"] == 1 and view.counts["working"] == 0
    assert view.started_at == datetime.fromtimestamp(at, UTC), "the task never learnt when it started"
