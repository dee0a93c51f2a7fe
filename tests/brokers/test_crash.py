"""kill -9 on every backend: the jobs a dead worker process held are recovered by another
once its heartbeat expires, and every job completes."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

from asynctask import Client, Settings
from asynctask.api import ProcessSet, Queue
from tests.brokers.conftest import SpawnWorker, read_runs
from tests.conftest import wait_until

JOBS = 40
#: Long enough that a kill finds several jobs running, short enough for the run to be quick.
JOB_SECONDS = 0.3


def test_jobs_of_a_killed_worker_are_recovered_after_its_heartbeat_expires(
    client: Client, settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    jids = client.push_bulk({"class": "record_slowly", "args": [[JOB_SECONDS]] * JOBS})
    doomed = spawn_worker(concurrency=5)
    wait_until(lambda: sum(run.event == "done" for run in read_runs(runs_file)) >= 10, timeout=20)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    killed_at = time.time()

    before = read_runs(runs_file)
    finished = {run.jid for run in before if run.event == "done"}
    cut_short = {run.jid for run in before if run.event == "start"} - finished
    assert cut_short, "the kill found no job running: it tested nothing"
    assert len(finished) < JOBS, "the kill came too late to test anything"

    survivor = spawn_worker(concurrency=5)
    wait_until(lambda: {r.jid for r in read_runs(runs_file) if r.event == "done"} == set(jids), timeout=60)
    runs = read_runs(runs_file)
    # Delivery is at least once: a job runs twice only if the dead process had started it,
    # either cut short or finished but not yet acknowledged (acks ride on the next fetch).
    started_by_doomed = {run.jid for run in before if run.event == "start"}
    starts = Counter(run.jid for run in runs if run.event == "start")
    twice = {jid for jid, count in starts.items() if count > 1}
    assert cut_short <= twice <= started_by_doomed
    # Those came back only once the dead process's heartbeat expired (process_ttl after its
    # last beat, which was at most heartbeat_interval before the kill), to the survivor.
    reruns = [run for run in runs[len(before) :] if run.jid in started_by_doomed and run.event == "start"]
    assert {run.jid for run in reruns} == twice
    assert {run.pid for run in reruns} == {survivor.pid}
    earliest = settings.process_ttl - settings.heartbeat_interval - 0.5
    assert min(run.at for run in reruns) - killed_at >= earliest
    assert max(starts.values()) == 2

    queue = Queue("default", settings=settings)
    wait_until(lambda: queue.size == 0)
    os.killpg(survivor.pid, signal.SIGTERM)
    assert survivor.wait(15) == 0
    processes = ProcessSet(settings=settings)
    wait_until(lambda: processes.size == 0, timeout=settings.process_ttl + 5)
    assert queue.size == 0
