"""Due times are compared with the broker's clock: a worker whose own clock runs 90 s fast runs
no scheduled job, retry or periodic tick early (SQLite's database is a file of the worker's own
machine, whose clock is the reference there: the Redis and PostgreSQL brokers are tried)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from asynctask import Client, Settings
from tests.brokers.conftest import ROOT, SpawnWorker
from tests.brokers.test_hostile import Hostile, RawStore, job
from tests.conftest import wait_until
from tests.records import written_lines

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

SHIFT = 90
JOBS = ROOT / "tests" / "jobs" / "fast_clock_jobs.py"
#: How early a run may be: the broker clock's offset is measured halfway through a round trip.
EARLY = 1.0


def runs(path: Path) -> list[tuple[str, float, float]]:
    found = []
    for line in written_lines(path):
        label, due, real = line.split()
        found.append((label, float(due), float(real)))
    return found


@pytest.fixture(params=["redis", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_worker_whose_clock_runs_90_s_fast_runs_nothing_early(
    client: Client, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    due = time.time() + 4
    client.push({"class": "due_at", "args": ["scheduled", due], "queue": "clock", "at": due})
    # A retry another worker (with a right clock) scheduled: its job waits in the retry set.
    store = RawStore(settings)
    try:
        retried = job(7, class_='"due_at"', args=f'["retry", {due!r}]', queue='"clock"')
        store.add(Hostile("retry", retried, ""), "retry", at=due)
    finally:
        store.close()
    worker = spawn_worker(jobs=JOBS, ASYNCTASK_TEST_CLOCK_SHIFT=str(SHIFT), ASYNCTASK_QUEUES="clock")
    try:
        wait_until(lambda: {label for label, _, _ in runs(runs_file)} >= {"scheduled", "retry", "tick"}, 30)
        time.sleep(2)  # a few more ticks
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    recorded = runs(runs_file)
    early = [(label, round(due - real, 3)) for label, due, real in recorded if real < due - EARLY]
    assert early == []
    assert sum(label == "tick" for label, _, _ in recorded) >= 2
