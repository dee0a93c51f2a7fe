"""Task callbacks while workers, and on Redis their flushers, are killed (-9) again and again.

A thousand tasks of twenty jobs each, every one with ``on_complete`` and ``on_success``, one task
in ten with a failing job, run by two workers of ten threads. One task in five waits for the task
created before it (``after``): half of those wait for a failing task, and are cancelled. Five
faults hit the drain. One task in ten starts with one job that adds the other nineteen to it.
Every task must call ``on_complete`` once and ``on_success`` once if it succeeded, never
otherwise, each after the task's last job ended (added ones included); a task that waits starts
no job before every job of its parent ran, and a cancelled one runs none; a task that grew has
twenty jobs, each run. A callback run twice is allowed
only where the first run's process was killed (delivery is at least once, as for any job); a
second push is not.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator

import psutil
import pytest
from sqlalchemy import Engine, func, select

import asynctask
from asynctask import Client, Registry, Tracking
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain
from asynctask.tracking.models import Event, Task
from tests.chaos.state import BrokerState
from tests.chaos.workers import Run, Runs, Timing, WorkerPool, WorkerProc

TASKS = 1000
JOBS = 20
#: Every this many tasks, one has a failing job.
FAILING_EVERY = 10
#: Every this many tasks, one waits for the task before it (every other one for a failing task).
CHILD_EVERY = 5
#: Every this many tasks, one is created with one job, which adds the rest.
GROWN_EVERY = 10
PAUSE_MS = 4
FAULTS = 5
TIMING = Timing(heartbeat=1.0, ttl=5, poll=1.0)
#: Seconds for the drain and every callback after the last fault (a bound, not a target).
SETTLE_LIMIT = 180.0


def _registry() -> Registry:
    """The test process's definitions of the workers' jobs (tests/chaos/chaos_jobs.py), which it
    cannot import: that module opens the workers' runs file."""
    registry = Registry()

    @asynctask.job(registry=registry, name="chaos_item")
    def chaos_item(chunk: list[int]) -> None: ...

    @asynctask.job(registry=registry, name="chaos_adder")
    def chaos_adder(chunk: list[list[int]]) -> None: ...

    @asynctask.job(registry=registry, name="chaos_on_complete")
    def chaos_on_complete(summary: dict[str, object]) -> None: ...

    @asynctask.job(registry=registry, name="chaos_on_success")
    def chaos_on_success(summary: dict[str, object]) -> None: ...

    return registry


@pytest.fixture(params=["redis", "sqlite", "postgres"])
def state(request: pytest.FixtureRequest) -> Iterator[BrokerState]:
    yield request.getfixturevalue(f"{request.param}_state")


def _flusher_of(worker: WorkerProc) -> psutil.Process | None:
    """The worker's flusher child process (Redis), if it runs one now."""
    for child in psutil.Process(worker.pid).children(recursive=True):
        try:
            if "flusher" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


@pytest.mark.slow
@pytest.mark.alone
def test_each_task_calls_back_once_through_kills_of_workers_and_flushers(
    state: BrokerState, pool: WorkerPool, runs: Runs
) -> None:
    settings = state.settings
    if settings.uses_redis:
        upgrade(settings.database_url)
    workers = pool.start(state, TIMING)
    client = Client(settings, registry=_registry(), middleware=Chain())
    tracking = Tracking(client)
    task_ids: list[str] = []
    failing: set[str] = set()
    parent_of: dict[str, str] = {}
    grown: list[str] = []
    created = threading.Event()

    def create() -> None:
        try:
            for n in range(TASKS):
                items = [PAUSE_MS] * JOBS
                if n % FAILING_EVERY == 0:
                    items[n % JOBS] = -1
                after = [task_ids[-1]] if n % CHILD_EVERY == 1 else None
                grows = n % GROWN_EVERY == 3
                view = tracking.create_task(
                    "chaos_adder" if grows else "chaos_item",
                    [[JOBS - 1, PAUSE_MS]] if grows else items,
                    on_complete="chaos_on_complete",
                    on_success="chaos_on_success",
                    after=after,
                )
                task_ids.append(view.id)
                if grows:
                    grown.append(view.id)
                if after:
                    parent_of[view.id] = after[0]
                if n % FAILING_EVERY == 0 or (after and after[0] in failing):
                    failing.add(view.id)
        finally:
            created.set()

    creator = threading.Thread(target=create, daemon=True)
    creator.start()
    killed: list[int] = []
    faults: list[str] = []
    try:
        for fault in range(FAULTS):
            assert runs.wait_done((fault + 1) * TASKS * JOBS // (FAULTS + 2), 120), (
                f"the drain stalled before fault {fault + 1}\n{pool.logs()}"
            )
            flusher = _flusher_of(workers[fault % 2]) if fault % 2 else None
            if flusher is not None:
                killed.append(flusher.pid)
                flusher.kill()
                faults.append("flusher")
            else:
                victim = workers[fault % 2]
                killed.append(victim.pid)
                victim.kill9()
                workers[fault % 2] = pool.spawn()
                faults.append("worker")
        assert runs.count_done() < TASKS * JOBS * 0.95, "the drain ended before the last fault"
        assert created.wait(120), "the tasks were not all created"
        creator.join()
        outcome = _settle(tracking, runs, task_ids, failing, parent_of, killed, pool)
        sizes = {view.total for view in map(tracking.get_task, grown)}
        assert sizes == {JOBS}, f"tasks that added their jobs have {sizes} jobs, not {JOBS}"
    finally:
        client.close()
        tracking.engine.dispose()
    print(f"\ncallbacks through {faults}: {outcome}")


def _settle(
    tracking: Tracking,
    runs: Runs,
    task_ids: list[str],
    failing: set[str],
    parent_of: dict[str, str],
    killed: list[int],
    pool: WorkerPool,
) -> str:
    """Wait until every task ended and called back; check each callback ran once (twice only
    after a kill) and after its task's last job, and each waiting task's jobs after its parent's
    or none of them; return a one-line report."""
    wanted = {(kind, task) for task in task_ids for kind in ("complete", "success") if not (
        kind == "success" and task in failing
    )}  # fmt: skip
    deadline = time.monotonic() + SETTLE_LIMIT
    while True:
        seen = {(run.event, run.jid) for run in runs.read() if run.event in ("complete", "success")}
        if wanted <= seen or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # Anything pushed twice would run well within this.
    time.sleep(3 * TIMING.ttl)
    by_callback: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for run in runs.read():
        if run.event in ("complete", "success"):
            by_callback[(run.event, run.jid)].append(run)
    missing = sorted(wanted - by_callback.keys())
    unwanted = sorted(by_callback.keys() - wanted)
    twice = {key: found for key, found in by_callback.items() if len(found) > 1}
    unexplained = {key: found for key, found in twice.items() if not any(found[0].by(pid) for pid in killed)}
    cancelled = {child for child, parent in parent_of.items() if parent in failing}
    ended, reruns, started = _job_ends(tracking.engine, task_ids, cancelled, runs, by_callback)
    early = sorted(key for key, found in by_callback.items() if found[0].at < ended.get(key[1], 0.0))
    jumped = sorted(
        child
        for child, parent in parent_of.items()
        if (child in cancelled and child in started)
        or (child not in cancelled and started[child] < ended[parent])
    )
    assert not (missing or unwanted or unexplained or early or jumped), (
        f"{len(missing)} callback(s) never ran (first {missing[:5]}), {len(unwanted)} ran that should not "
        f"({unwanted[:5]}), {len(unexplained)} ran twice with no kill of the first run's process "
        f"({list(unexplained.items())[:3]}), {len(early)} started before every job of their task had run "
        f"({early[:5]}), {len(jumped)} waiting task(s) ran a job before their parent's had all run, or "
        f"though cancelled ({jumped[:5]})\n{pool.logs()}"
    )
    return (
        f"{len(task_ids)} tasks ({len(parent_of)} waiting for another, {len(cancelled)} of them cancelled), "
        f"{len(wanted)} callbacks ran, {len(twice)} of them twice after a kill "
        f"of the process running it; {reruns} job(s) of ended tasks ran again after their task's "
        "callback (their end was recorded, their acknowledgement lost with the killed worker)"
    )


def _job_ends(
    engine: Engine,
    task_ids: list[str],
    cancelled: set[str],
    runs: Runs,
    by_callback: dict[tuple[str, str], list[Run]],
) -> tuple[dict[str, float], int, dict[str, float]]:
    """When every job of each task had run to its end once (the latest of its jobs' first ends,
    from the runs file), checking that every task ended in SQL (``cancelled`` ones cancelled);
    how many jobs ran again after their task's first callback started (at least once: a job
    whose end was recorded may run again if its worker is killed before acknowledging it); and
    when each task's first job started."""
    with engine.connect() as connection:
        open_tasks = connection.execute(
            select(func.count()).select_from(Task).where(Task.finished_at.is_(None))
        ).scalar_one()
        assert open_tasks == 0, f"{open_tasks} task(s) never ended"
        jobs = connection.execute(select(Event.job_id, Event.task_id).where(Event.task_id.is_not(None))).all()
        states = dict(
            connection.execute(select(Task.id, Task.state).where(Task.id.in_(sorted(cancelled)))).all()
        )
    assert set(states.values()) <= {"cancelled"}, f"tasks that waited for a failing task: {states}"
    first_end: dict[str, float] = {}
    first_start: dict[str, float] = {}
    ends: dict[str, list[float]] = defaultdict(list)
    for run in runs.read():
        if run.event in ("done", "failed"):
            first_end.setdefault(run.jid, run.at)
            ends[run.jid].append(run.at)
        elif run.event == "start":
            first_start.setdefault(run.jid, run.at)
    ours = set(task_ids)
    ended: dict[str, float] = {}
    started: dict[str, float] = {}
    reruns = 0
    for jid, task_id in jobs:
        if task_id not in ours:
            continue
        if jid in first_start:
            started[task_id] = min(started.get(task_id, first_start[jid]), first_start[jid])
        if task_id in cancelled:
            continue
        assert jid in first_end, f"job {jid} of task {task_id} never ran, yet its task ended"
        ended[task_id] = max(ended.get(task_id, 0.0), first_end[jid])
        called = by_callback.get(("complete", task_id))
        if called and any(at > called[0].at for at in ends[jid][1:]):
            reruns += 1
    return ended, reruns, started
