"""End to end: a task of 1,000 jobs mixing every outcome, run by real worker processes,
one of them stopped with TERM while jobs run; final counts and message logs must be exact."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis

from asynctask import Settings, Tracking
from tests.conftest import wait_until
from tests.tracking_fixtures import wait_for_task

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "jobs" / "tracking_jobs.py"

KINDS = {"slow": 10, "ok": 740, "business": 100, "flaky": 100, "dead": 50}


def expected_log(kind: str, i: int) -> list[tuple[str, str]]:
    """(status, text) of every message the event of item ``i`` must end with, in order."""
    return {
        "ok": [("working", "started"), ("finish", "finished")],
        "business": [("working", "started"), ("failed", f"seller {i} does not qualify")],
        "flaky": [
            ("working", "started"),
            ("error", f"RuntimeError: flaky {i}"),
            ("enqueue", "waiting for retry 1 of 1"),
            ("working", "started"),
            ("finish", "finished"),
        ],
        "dead": [
            ("working", "started"),
            ("error", f"ValueError: broken {i}"),
            ("enqueue", "waiting for retry 1 of 1"),
            ("working", "started"),
            ("error", f"ValueError: broken {i}"),
            ("error", "no retries left; moved to the dead set"),
        ],
        "slow": [
            ("working", "started"),
            ("error", "interrupted by shutdown"),
            ("enqueue", "pushed back to its queue; it will run again"),
            ("working", "started"),
            ("finish", "finished"),
        ],
    }[kind]


FINAL = {"ok": "finish", "business": "failed", "flaky": "finish", "dead": "error", "slow": "finish"}
ATTEMPTS = {"ok": 1, "business": 1, "flaky": 2, "dead": 2, "slow": 2}


def spawn(settings: Settings, database_url: str, hold: Path, concurrency: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "ASYNCTASK_REDIS_URL": settings.redis_url,
        "ASYNCTASK_NAMESPACE": settings.namespace,
        "ASYNCTASK_DATABASE_URL": database_url,
        "ASYNCTASK_HEARTBEAT_INTERVAL": "0.5",
        "ASYNCTASK_PROCESS_TTL": "3",
        "ASYNCTASK_SCHEDULED_POLL_INTERVAL": "0.2",
        "TRACKING_TEST_HOLD": str(hold),
    }
    command = [
        sys.executable,
        "-m",
        "asynctask",
        "worker",
        "-r",
        str(JOBS),
        "-c",
        str(concurrency),
        "-t",
        "1",
    ]
    return subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True)


@pytest.mark.slow
def test_task_of_1000_jobs_with_every_outcome_ends_exactly_right(
    redis_tracking: Tracking,
    tracked_settings: Settings,
    database_url: str,
    conn: redis.Redis,
    namespace: str,
    tmp_path: Path,
) -> None:
    from tests.jobs import tracking_jobs

    redis_tracking.client.registry.add(tracking_jobs.mixed)
    others = [kind for kind, n in KINDS.items() if kind != "slow" for _ in range(n)]
    random.Random(7).shuffle(others)
    # Slow items first: the first worker's threads take them before anything else.
    kinds = ["slow"] * KINDS["slow"] + others
    items = [{"i": i, "kind": kind} for i, kind in enumerate(kinds)]
    task = redis_tracking.create_task("mixed", items)
    assert task.total == 1000 and task.status == "pending"

    hold = tmp_path / "hold"
    hold.touch()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(spawn(tracked_settings, database_url, hold, concurrency=15))

        def slow_running_and_rest_settled() -> bool:
            view = redis_tracking.get_task(task.id)
            counts = view.counts
            return counts["working"] == KINDS["slow"] and counts["finish"] + counts["failed"] >= 840

        wait_until(slow_running_and_rest_settled, timeout=60, interval=0.1)
        procs[0].send_signal(signal.SIGTERM)
        assert procs[0].wait(20) == 0
        hold.unlink()
        procs.append(spawn(tracked_settings, database_url, hold, concurrency=10))
        final = wait_for_task(redis_tracking, task.id, timeout=60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(20)

    assert final.status == "finished_with_errors"
    assert final.counts == {
        "enqueue": 0,
        "working": 0,
        "finish": KINDS["ok"] + KINDS["flaky"] + KINDS["slow"],
        "failed": KINDS["business"],
        "error": KINDS["dead"],
        "cancelled": 0,
        "stopped": 0,
        "lost": 0,
    }
    assert final.done == 1000 and final.progress == 1.0 and final.finished_at is not None
    assert len(final.errors) == 10 and {e.status for e in final.errors} <= {"failed", "error"}

    events = redis_tracking.list_events(task.id, limit=1000)
    assert len(events.items) == 1000 and events.next_cursor is None
    seen: Counter[str] = Counter()
    for event in events.items:
        assert event.params is not None
        item: dict[str, Any] = event.params[0][0]
        kind, i = item["kind"], item["i"]
        seen[kind] += 1
        log = [(m.status, m.text) for m in event.messages]
        assert log == expected_log(kind, i), (kind, i, log)
        assert event.status == FINAL[kind], (kind, i)
        assert event.attempt == ATTEMPTS[kind], (kind, i, event.attempt)
        if kind == "business":
            assert event.error_class == "asynctask.JobFailed"
        if kind == "dead":
            assert event.error_class == "ValueError" and event.error == f"ValueError: broken {i}"
    assert seen == Counter(KINDS)
    assert conn.zcard(f"{namespace}:dead") == KINDS["dead"]
    assert conn.llen(f"{namespace}:queue:default") == 0
