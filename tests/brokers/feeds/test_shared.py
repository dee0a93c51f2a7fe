"""Fed tasks end to end on every broker, with worker subprocesses: a task's jobs are released
at most ``parallel`` at a time, at most once per ``interval``, at a ``priority``, and all three
(and pause, resume, cancel) change while the task runs. No process is the feeder: killing
every worker stalls nothing.

The jobs (tests/jobs/flow_jobs.py ``feed_step``) record their runs in the runs file; the
measures are taken on those records, not on what the broker says of itself.
"""

from __future__ import annotations

import bisect
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from asynctask import Settings, Tracking, default_registry
from asynctask.api import Queue
from asynctask.middleware import Chain, TrackingClientMiddleware
from tests.brokers.conftest import MakeClient, SpawnWorker
from tests.brokers.flow.support import Interval, intervals, max_overlap, read_events, start_flow_workers
from tests.conftest import wait_until
from tests.jobs.flow_jobs import feed_step
from tests.tracking_fixtures import wait_for_task

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

#: The chunk job of every fed task here, by name (importing it registered it).
JOB = feed_step.name


@pytest.fixture
def feeding(make_client: MakeClient, engine: Engine) -> Tracking:
    """Tracking whose client knows tests/jobs/flow_jobs.py's ``feed_step``."""
    client = make_client(middleware=Chain([TrackingClientMiddleware()]), registry=default_registry)
    return Tracking(client, engine)


def items(key: str, count: int, seconds: float) -> list[dict[str, Any]]:
    return [{"key": key, "seq": n, "seconds": seconds} for n in range(count)]


def runs_of(runs_file: Path, key: str | None = None) -> list[Interval]:
    return [r for r in intervals(read_events(runs_file)) if key is None or r.key == key]


def starts(runs_file: Path, key: str | None = None) -> list[float]:
    return sorted(e.at for e in read_events(runs_file) if e.event == "start" and key in (None, e.key))


def done_seqs(runs_file: Path, key: str) -> list[int]:
    return sorted(e.seq for e in read_events(runs_file) if e.event == "done" and e.key == key)


def overlap_between(runs: list[Interval], start: float, end: float) -> int:
    """The most runs in progress at one instant of [start, end] (runs clipped to it)."""
    now = time.time()
    clipped = [
        Interval(r.jid, r.key, r.seq, max(r.start, start), min(r.end or now, end), r.outcome)
        for r in runs
        if r.start < end and (r.end or now) > start
    ]
    return max_overlap(clipped)


class QueueSampler:
    """Samples the queue's length every 10 ms, with the times just before and after each read."""

    def __init__(self, settings: Settings) -> None:
        self.queue = Queue("default", settings=settings)
        self.samples: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> QueueSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            before = time.time()
            size = self.queue.size
            self.samples.append((before, size, time.time()))
            self._stop.wait(0.01)


def queued_or_running(sampler: QueueSampler, runs: list[Interval]) -> tuple[int, int]:
    """The most of the task's jobs queued or running at once over the unambiguous samples, and
    how many samples were unambiguous.

    A sample is unambiguous when no run started or ended while the queue was being read: then
    the runs in progress are exactly those around the read, and none of them is also counted
    in the queue."""
    edges = sorted([r.start for r in runs] + [r.end for r in runs if r.end is not None])
    most = clear = 0
    for before, size, after in sampler.samples:
        following = bisect.bisect_left(edges, before)
        if following < len(edges) and edges[following] <= after:
            continue
        running = sum(1 for r in runs if r.start < before and (r.end is None or r.end > after))
        most = max(most, size + running)
        clear += 1
    return most, clear


@pytest.fixture
def two_workers(spawn_worker: SpawnWorker, settings: Settings) -> Iterator[None]:
    start_flow_workers(spawn_worker, settings, processes=2, concurrency=10)
    yield


def test_a_fed_task_never_has_more_than_parallel_jobs_queued_or_running(
    feeding: Tracking, settings: Settings, runs_file: Path, two_workers: None
) -> None:
    with QueueSampler(settings) as sampler:
        task = feeding.create_task(JOB, items("t", 300, 0.02), parallel=3)
        done = wait_for_task(feeding, task.id, timeout=60)
    assert done.status == "finished" and done.counts["finish"] == 300
    runs = runs_of(runs_file)
    # Every job ran exactly once (one start and one end per jid, one jid per item).
    assert len(runs) == 300 and len({r.jid for r in runs}) == 300
    assert done_seqs(runs_file, "t") == list(range(300))
    assert max_overlap(runs) == 3
    most, clear = queued_or_running(sampler, runs)
    assert clear >= 50, f"only {clear} of {len(sampler.samples)} samples could be read unambiguously"
    assert most <= 3


def test_parallel_changes_while_the_task_runs(
    feeding: Tracking, settings: Settings, runs_file: Path, two_workers: None
) -> None:
    # Jobs long next to an acknowledgement's round trip: between one job's end and the next
    # one's start its slot is busy, and on a loaded SQLite file a round trip takes milliseconds.
    task = feeding.create_task(JOB, items("t", 200, 0.3), parallel=2)
    wait_until(lambda: len(starts(runs_file)) >= 4, 20)
    raised = time.time()
    feeding.update_task(task.id, parallel=10)
    time.sleep(1.5)
    lowered = time.time()
    feeding.update_task(task.id, parallel=1)
    time.sleep(2.5)
    feeding.update_task(task.id, parallel=20)
    done = wait_for_task(feeding, task.id, timeout=60)
    assert done.status == "finished" and done_seqs(runs_file, "t") == list(range(200))
    runs = runs_of(runs_file)
    assert overlap_between(runs, 0, raised) <= 2
    # Raised: ten at once before it is lowered again (1.5 s, five job lengths: on a loaded
    # machine each slot is briefly empty between a job's end and the next one's start).
    assert overlap_between(runs, raised, lowered) == 10
    assert overlap_between(runs, lowered + 1, lowered + 2.5) == 1


def test_pause_stops_releases_resume_continues_and_cancel_ends_a_paused_task(
    feeding: Tracking, settings: Settings, runs_file: Path, two_workers: None
) -> None:
    task = feeding.create_task(JOB, items("t", 300, 0.05), parallel=4)
    wait_until(lambda: len(starts(runs_file)) >= 8, 20)
    paused = time.time()
    state = feeding.pause_task(task.id)
    assert state is not None and state.feed.paused
    time.sleep(2)
    assert [at for at in starts(runs_file) if at > paused + 1] == []
    view = feeding.get_task(task.id)
    assert view.status == "running" and view.counts["finish"] < 300
    resumed = time.time()
    feeding.resume_task(task.id)
    wait_until(lambda: len([at for at in starts(runs_file) if at > resumed]) >= 8, 10)
    feeding.pause_task(task.id)
    cancelled = time.time()
    feeding.cancel_task(task.id)
    assert wait_for_task(feeding, task.id, timeout=20).status == "cancelled"
    time.sleep(1.5)
    assert [at for at in starts(runs_file) if at > cancelled + 1] == []
    assert len(done_seqs(runs_file, "t")) < 300


def test_raising_a_tasks_priority_runs_its_jobs_before_the_others(
    feeding: Tracking, settings: Settings, runs_file: Path, spawn_worker: SpawnWorker
) -> None:
    # One process of two threads: four released jobs of each task wait for them.
    start_flow_workers(spawn_worker, settings, processes=1, concurrency=2)
    first = feeding.create_task(JOB, items("a", 300, 0.05), parallel=4)
    other = feeding.create_task(JOB, items("b", 300, 0.05), parallel=4)
    wait_until(lambda: len(starts(runs_file, "a")) >= 5 and len(starts(runs_file, "b")) >= 5, 20)
    raised = time.time()
    feeding.update_task(other.id, priority=-10)
    time.sleep(2)
    window = [e for e in read_events(runs_file) if e.event == "start" and raised + 1 <= e.at <= raised + 2]
    assert {e.key for e in window} == {"b"}, "the raised task's jobs did not take the threads"
    assert len(window) >= 20
    feeding.cancel_task(first.id)
    feeding.cancel_task(other.id)


def test_killing_every_worker_mid_feed_stalls_nothing(
    feeding: Tracking, settings: Settings, runs_file: Path, spawn_worker: SpawnWorker
) -> None:
    workers = start_flow_workers(spawn_worker, settings, processes=2, concurrency=5)
    task = feeding.create_task(JOB, items("t", 150, 0.05), parallel=5)
    wait_until(lambda: len(starts(runs_file)) >= 20, 20)
    for proc in workers:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    restarted = time.time()
    start_flow_workers(spawn_worker, settings, processes=2, concurrency=5)
    done = wait_for_task(feeding, task.id, timeout=90)
    assert done.status == "finished"
    # At least once: a job killed mid-run runs again.
    assert sorted(set(done_seqs(runs_file, "t"))) == list(range(150))
    assert max_overlap([r for r in runs_of(runs_file) if r.start > restarted]) <= 5


def test_an_interval_spaces_releases_of_at_most_parallel_jobs(
    feeding: Tracking, settings: Settings, runs_file: Path, two_workers: None
) -> None:
    task = feeding.create_task(JOB, items("t", 15, 0.02), parallel=5, interval=1)
    assert wait_for_task(feeding, task.id, timeout=30).status == "finished"
    times = starts(runs_file)
    assert len(times) == 15
    bursts: list[list[float]] = []
    for at in times:
        if bursts and at - bursts[-1][0] < 0.5:
            bursts[-1].append(at)
        else:
            bursts.append([at])
    assert [len(b) for b in bursts] == [5, 5, 5]
    assert all(b[0] - a[0] >= 0.9 for a, b in itertools.pairwise(bursts))
