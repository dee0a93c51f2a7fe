"""Resumable jobs on every backend: checkpoints, stop and resume by jid, and shutdowns and
crashes that continue where the job stopped."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from asynctask import Client, JobNotFound, JobStateError, Registry, Settings, Tracking, job, payload
from asynctask.api import Queue, ScheduledSet, StoppedSet
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.tasks.jobs import StopState
from asynctask.worker import Worker
from tests.brokers.conftest import ROOT, JobKind, SpawnWorker
from tests.cli_support import run_cli, without_asynctask_environment
from tests.conftest import wait_until
from tests.records import written_lines

RESUMABLE_JOBS = ROOT / "tests" / "jobs" / "resumable_jobs.py"


@pytest.fixture
def counted(registry: Registry, job_kind: JobKind) -> tuple[list[int], threading.Event]:
    """``counting(total, pause_ms)``, a resumable job recording each iteration's index, and
    the event it sets once it has run ``total`` iterations over all its runs (a generator, or
    an async generator)."""
    seen: list[int] = []
    done = threading.Event()

    @job(registry=registry)
    @job_kind
    def counting(total: int, pause_ms: int, cursor: int | None = None) -> Iterator[int]:
        for index in range(0 if cursor is None else cursor + 1, total):
            time.sleep(pause_ms / 1000)
            seen.append(index)
            yield index
        done.set()

    return seen, done


def test_a_stopped_job_is_parked_with_its_cursor_and_resumes_from_it(
    client: Client,
    tracking: Tracking,
    settings: Settings,
    start_worker: Callable[..., Worker],
    counted: tuple[list[int], threading.Event],
) -> None:
    seen, done = counted
    start_worker(concurrency=2)
    jid = client.push({"class": "counting", "args": [200, 10]})
    wait_until(lambda: len(seen) >= 50)
    assert tracking.stop_job(jid) == StopState.STOPPING
    stopped = StoppedSet(settings=settings)
    entry = wait_until(lambda: stopped.find_job(jid), timeout=5)
    parked_at = len(seen)
    assert entry.get("cursor") == seen[-1] and entry.klass == "counting"
    time.sleep(2)
    assert len(seen) == parked_at, "a stopped job ran on"
    assert not done.is_set()

    assert tracking.resume_job(jid) == "default"
    assert done.wait(15)
    assert sorted(seen) == list(range(200)), "an iteration was skipped or run twice"
    assert stopped.size == 0
    wait_until(lambda: client.broker.checkpoints.load(jid).cursor is None)


def test_stop_answers_for_each_state_of_a_job(
    client: Client,
    tracking: Tracking,
    settings: Settings,
    start_worker: Callable[..., Worker],
    counted: tuple[list[int], threading.Event],
) -> None:
    seen, done = counted
    queued = client.push({"class": "counting", "args": [3, 1]})
    scheduled = client.push({"class": "counting", "args": [3, 1], "at": payload.now() + 600})
    stopped = StoppedSet(settings=settings)

    # Waiting jobs are parked at once, without running; a second stop changes nothing.
    assert tracking.stop_job(queued) == StopState.STOPPED
    assert tracking.stop_job(scheduled) == StopState.STOPPED
    first = stopped.find_job(queued)
    assert tracking.stop_job(queued) == StopState.STOPPED
    assert stopped.find_job(queued) == first and stopped.size == 2
    assert Queue("default", settings=settings).size == 0 and ScheduledSet(settings=settings).size == 0
    with pytest.raises(JobNotFound):
        tracking.stop_job("0123456789abcdef01234567")

    start_worker(concurrency=2)
    time.sleep(1)
    assert seen == [], "a stopped job ran"
    running = client.push({"class": "counting", "args": [1000, 10]})
    wait_until(lambda: len(seen) >= 5)
    with pytest.raises(JobStateError) as refused:
        tracking.resume_job(running)
    assert refused.value.code == "job_not_stopped"
    # Stop twice while it runs: both ask, the job is parked once, its cursor as it stopped.
    assert tracking.stop_job(running) == StopState.STOPPING
    assert tracking.stop_job(running) == StopState.STOPPING
    entry = wait_until(lambda: stopped.find_job(running), timeout=5)
    assert client.broker.checkpoints.load(running).cursor == str(entry.get("cursor"))
    assert tracking.stop_job(running) == StopState.STOPPED

    assert tracking.resume_job(queued) == "default"
    assert done.wait(10)
    assert seen[-3:] == [0, 1, 2], "a job parked before it ran starts from the beginning"


def test_a_plain_job_cannot_be_stopped(
    client: Client, tracking: Tracking, settings: Settings, registry: Registry
) -> None:
    @job(registry=registry)
    def plain() -> None:
        pass

    jid = client.push({"class": "plain", "args": []})
    with pytest.raises(JobStateError) as refused:
        tracking.stop_job(jid)
    assert refused.value.code == "job_not_resumable"
    assert Queue("default", settings=settings).size == 1
    assert not client.broker.checkpoints.load(jid).stop


@pytest.mark.parametrize("name", ["count", "count_async"])
def test_term_hands_the_job_back_at_its_checkpoint_and_the_next_worker_continues(
    name: str, client: Client, settings: Settings, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    iterations = tmp_path / "iterations.txt"
    jid = client.push({"class": name, "args": [300, 10]})
    first = spawn_worker(
        concurrency=2, timeout=5, jobs=RESUMABLE_JOBS, ASYNCTASK_TEST_ITERATIONS=str(iterations)
    )
    wait_until(lambda: len(_iterations(iterations)) >= 50, timeout=20)
    os.killpg(first.pid, signal.SIGTERM)
    assert first.wait(15) == 0
    before = _iterations(iterations)
    assert Queue("default", settings=settings).size == 1, "the stopped worker did not give the job back"

    second = spawn_worker(concurrency=2, jobs=RESUMABLE_JOBS, ASYNCTASK_TEST_ITERATIONS=str(iterations))
    wait_until(lambda: max((i for _, i, _ in _iterations(iterations)), default=0) == 299, timeout=30)
    after = _iterations(iterations)[len(before) :]
    assert {pid for _, _, pid in after} == {second.pid}
    # It went on from the checkpoint stored as the shutdown began: nothing ran twice.
    assert after[0][1] == before[-1][1] + 1
    assert sorted(i for _, i, _ in _iterations(iterations)) == list(range(300))
    assert {j for j, _, _ in after} == {jid}


@pytest.mark.alone
def test_a_killed_worker_s_job_continues_from_its_last_stored_checkpoint(
    client: Client, settings: Settings, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    iterations = tmp_path / "iterations.txt"
    client.push({"class": "count", "args": [400, 10]})
    doomed = spawn_worker(concurrency=2, jobs=RESUMABLE_JOBS, ASYNCTASK_TEST_ITERATIONS=str(iterations))
    wait_until(lambda: len(_iterations(iterations)) >= 150, timeout=20)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    before = _iterations(iterations)

    spawn_worker(concurrency=2, jobs=RESUMABLE_JOBS, ASYNCTASK_TEST_ITERATIONS=str(iterations))
    wait_until(
        lambda: max((i for _, i, _ in _iterations(iterations)[len(before) :]), default=0) == 399,
        timeout=settings.process_ttl + 30,
    )
    after = _iterations(iterations)[len(before) :]
    runs = Counter(i for _, i, _ in _iterations(iterations))
    assert set(runs) == set(range(400))
    # Recovery continued from the last checkpoint stored, at most a checkpoint interval
    # (about 100 iterations of 10 ms) before the kill: not from the start.
    assert 0 < after[0][1] <= before[-1][1] + 1
    assert before[-1][1] - after[0][1] < 150
    assert all(count <= 2 for count in runs.values())


def _iterations(path: Path) -> list[tuple[str, int, int]]:
    rows = []
    for line in written_lines(path):
        jid, index, pid = line.split()
        rows.append((jid, int(index), int(pid)))
    return rows


def test_the_shell_stops_lists_and_resumes_a_job(
    client: Client,
    settings: Settings,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    without_asynctask_environment(monkeypatch)
    connection = ["--broker", settings.broker, "--database-url", settings.database_url]
    if settings.uses_redis:
        connection += ["--namespace", settings.namespace]

    def shell(*argv: str) -> tuple[int, str, str]:
        return run_cli([*argv, *connection], capsys)

    jid = client.push({"class": "count", "args": [3, 1]})
    assert shell("jobs", "stop", jid) == (0, f"job {jid} stopped\n", "")
    status, out, _ = shell("jobs", "stopped")
    assert status == 0 and f"  {jid}  count on default  cursor null" in out
    assert shell("jobs", "resume", jid) == (0, f"job {jid} resumed on default\n", "")
    assert Queue("default", settings=settings).size == 1
    status, _, err = shell("jobs", "resume", jid)
    assert status == 1 and "is not stopped" in err
    assert shell("jobs", "stop", "no-such-job") == (1, "", "asynctask: no job no-such-job\n")
    assert shell("jobs", "stopped") == (0, "no job is stopped\n", "")


def test_pausing_a_fed_task_hands_its_running_job_back_to_the_feed_until_resumed(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker], job_kind: JobKind
) -> None:
    seen: list[int] = []

    @job(registry=registry)
    @job_kind
    def sweep(items: list[int], cursor: int | None = None) -> Iterator[int]:
        for index in range(0 if cursor is None else cursor + 1, len(items)):
            time.sleep(0.01)
            seen.append(index)
            yield index

    start_worker(concurrency=2, server_middleware=Chain([TrackingServerMiddleware()]))
    task = tracking.create_task(sweep, list(range(300)), chunk_size=300, parallel=1)
    wait_until(lambda: len(seen) >= 20)
    tracking.pause_task(task.id)
    # It stops at its next checkpoint, not at its end.
    wait_until(
        lambda: (feed := tracking.client.broker.feeds.state(task.id)) is not None and feed.held == 1, 15
    )
    paused_at = len(seen)
    assert paused_at < 300
    time.sleep(1.5)
    assert len(seen) == paused_at, "the job ran on while its task was paused"

    tracking.resume_task(task.id)
    wait_until(lambda: len(seen) == 300 and tracking.get_task(task.id).status == "finished", 20)
    assert seen == list(range(300)), "an iteration was skipped or ran twice"


def test_cancelling_a_task_drops_its_stopped_jobs(
    tracking: Tracking, registry: Registry, settings: Settings
) -> None:
    @job(registry=registry)
    def sweep(items: list[int], cursor: int | None = None) -> Iterator[int]:
        yield from items

    task = tracking.create_task(sweep, [1, 2, 3], chunk_size=1)
    other = tracking.create_task(sweep, [4], chunk_size=1)
    jids = [event.job_id for event in tracking.list_events(task.id).items]
    [kept] = [event.job_id for event in tracking.list_events(other.id).items]
    for jid in [*jids[:2], kept]:
        assert tracking.stop_job(jid) == StopState.STOPPED
    tracking.client.broker.checkpoints.save(jids[0], "7", 8)
    stopped = StoppedSet(settings=settings)
    assert stopped.size == 3

    tracking.cancel_task(task.id)
    assert [entry.jid for entry in stopped] == [kept]
    assert tracking.client.broker.checkpoints.load(jids[0]).cursor is None
    assert tracking.get_task(task.id).counts["cancelled"] == 3


@pytest.mark.alone
def test_a_job_stopped_after_its_worker_died_is_parked_at_its_last_checkpoint_once_recovered(
    client: Client, tracking: Tracking, settings: Settings, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    iterations = tmp_path / "iterations.txt"
    jid = client.push({"class": "count", "args": [1000, 10]})
    doomed = spawn_worker(concurrency=2, jobs=RESUMABLE_JOBS, ASYNCTASK_TEST_ITERATIONS=str(iterations))
    wait_until(lambda: client.broker.checkpoints.load(jid).cursor is not None, timeout=20)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    checkpoint = client.broker.checkpoints.load(jid).cursor
    ran = len(_iterations(iterations))

    # Its dead worker still holds it: it is parked once a live worker takes it back.
    assert tracking.stop_job(jid) == StopState.STOPPING
    spawn_worker(concurrency=2, jobs=RESUMABLE_JOBS, ASYNCTASK_TEST_ITERATIONS=str(iterations))
    entry = wait_until(lambda: StoppedSet(settings=settings).find_job(jid), timeout=settings.process_ttl + 20)
    assert str(entry.get("cursor")) == checkpoint
    assert len(_iterations(iterations)) == ran, "the recovered job ran before it was parked"
