"""Pausing a queue on every broker, with real worker processes: while it is paused no process
takes its jobs (pushes still land in it) and the other queues are served as ever; once
resumed, its jobs all run.
"""

from __future__ import annotations

import time
from pathlib import Path

from asynctask import Client, Settings
from asynctask.api import ProcessSet, Queue
from tests.brokers.conftest import SpawnWorker, read_runs
from tests.conftest import wait_until

#: How long the paused queue is watched while the other queue's jobs keep coming.
PAUSED_FOR = 5.0
HELD_JOBS = 20


def done(runs_file: Path) -> set[str]:
    return {run.jid for run in read_runs(runs_file) if run.event == "done"}


def test_no_worker_process_takes_a_paused_queues_jobs_until_it_is_resumed(
    client: Client, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    # The paused queue comes first (strict order): every claim would reach it first.
    for _ in range(2):
        spawn_worker(concurrency=5, ASYNCTASK_QUEUES="held;default")
    wait_until(lambda: ProcessSet(settings=settings).size == 2, timeout=20)
    # Idle: on Redis threads now block on each queue, "held" included, when it is paused.
    warm = client.push({"class": "record", "args": [0], "queue": "default"})
    wait_until(lambda: warm in done(runs_file), timeout=20)
    held = Queue("held", settings=settings)

    held.pause()
    held_jids = set(client.push_bulk({"class": "record", "args": [[0]] * HELD_JOBS, "queue": "held"}))

    served: set[str | None] = set()
    deadline = time.monotonic() + PAUSED_FOR
    while time.monotonic() < deadline:
        served |= set(client.push_bulk({"class": "record", "args": [[0]] * 5, "queue": "default"}))
        time.sleep(0.25)
        assert not held_jids & done(runs_file), "a job of the paused queue ran"
    wait_until(lambda: served <= done(runs_file), timeout=20)
    assert not held_jids & done(runs_file), "a job of the paused queue ran"
    assert held.size == HELD_JOBS and held.paused

    held.resume()

    wait_until(lambda: held_jids <= done(runs_file), timeout=20)
    runs = [run.jid for run in read_runs(runs_file) if run.jid in held_jids]
    assert sorted(runs) == sorted(held_jids)
    assert held.size == 0
