"""Several worker processes on one broker: 20,000 jobs, each run exactly once, none lost."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import pytest

from asynctask import Client, Settings
from asynctask.api import ProcessSet, Queue, Stats
from tests.brokers.conftest import SpawnWorker, read_runs
from tests.conftest import wait_until

JOBS = 20_000
CONCURRENCY = 8


def lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


#: The SQL broker is what this load tests; Redis (whose fetch tests/test_reliability.py
#: already proves) runs the heavier case only.
SETUPS = [("sqlite", 2), ("sqlite", 4), ("postgresql", 2), ("postgresql", 4), ("redis", 4)]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "processes"), SETUPS)
def test_worker_processes_sharing_a_broker_run_every_job_exactly_once(
    processes: int, client: Client, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    workers = [spawn_worker(concurrency=CONCURRENCY) for _ in range(processes)]
    live = ProcessSet(settings=settings)
    # All of them fetch from the start, so that they compete for every job.
    wait_until(lambda: live.size == processes, timeout=30)

    jids = client.push_bulk({"class": "record", "args": [[0]] * JOBS})
    wait_until(lambda: lines(runs_file) >= JOBS, timeout=240, interval=0.2)
    queue = Queue("default", settings=settings)
    wait_until(lambda: queue.size == 0)
    for worker in workers:
        os.killpg(worker.pid, signal.SIGTERM)
    assert [worker.wait(30) for worker in workers] == [0] * processes

    runs = read_runs(runs_file)
    ran = Counter(run.jid for run in runs)
    assert [jid for jid, count in ran.items() if count > 1] == []
    assert len(ran) == JOBS and set(ran) == set(jids)
    assert {run.pid for run in runs} == {worker.pid for worker in workers}
    assert queue.size == 0 and live.size == 0
    stats = Stats(settings=settings)
    assert (stats.processed, stats.failed, stats.enqueued) == (JOBS, 0, 0)
