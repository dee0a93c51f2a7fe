"""Periodic jobs in worker processes: kill -9 at random moments never loses or doubles a tick
while a worker lives, and ticks missed while every worker was down follow ``catch_up``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from asynctask import Settings
from asynctask.api import PeriodicSet, ProcessSet
from asynctask.api.reader import close_shared
from asynctask.db.migrate import upgrade
from tests.brokers.conftest import ROOT, SpawnWorker, worker_env
from tests.conftest import REDIS_URL, fast_settings, fresh_postgres_schema, wait_until
from tests.records import written_lines

JOBS = ROOT / "tests" / "jobs" / "periodic_jobs.py"
#: The catch-up rules, each the name of the job module's schedule that follows it.
RULES = ("latest", "all", "none")


def ticks(runs_file: Path, schedule: str = "latest") -> dict[int, set[str]]:
    """The schedule's scheduled seconds -> the jids their runs carried (several runs of one
    job: one jid)."""
    found: dict[int, set[str]] = defaultdict(set)
    for line in written_lines(runs_file):
        _, name, tick, jid, _, _ = line.split()
        if name == schedule:
            found[int(tick)].add(jid)
    return found


def kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(20) == 0


@pytest.fixture
def every_broker(namespace: str, tmp_path: Path) -> Iterator[dict[str, Settings]]:
    """A private Redis namespace, SQLite file and PostgreSQL schema, at the suite's timings."""
    tracking = f"sqlite:///{tmp_path / 'tracking.db'}"
    sqlite = f"sqlite:///{tmp_path / 'broker.db'}"
    upgrade(sqlite)
    with fresh_postgres_schema() as postgres:
        upgrade(postgres)
        yield {
            "redis": fast_settings(redis_url=REDIS_URL, namespace=namespace, database_url=tracking),
            "sqlite": fast_settings(broker_url=sqlite),
            "postgresql": fast_settings(broker_url=postgres),
        }
        close_shared()


# Runs beside other tests: it checks that each tick runs once, not how soon.
@pytest.mark.slow
def test_kill_9_of_two_of_three_workers_loses_and_doubles_no_tick(
    every_broker: dict[str, Settings], tmp_path: Path
) -> None:
    """On every broker at once (a minute each would be three): three workers, two of them
    killed at random moments, one started again; every tick of the minute runs, once."""
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(settings: Settings, runs: Path) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "asynctask", "worker", "-r", str(JOBS), "-c", "2", "-t", "5"]
        env = worker_env(settings, ASYNCTASK_TEST_RUNS=str(runs))
        procs.append(subprocess.Popen(command, env=env, cwd=ROOT, start_new_session=True))
        return procs[-1]

    runs = {name: tmp_path / f"{name}.runs" for name in every_broker}
    workers = {name: [spawn(s, runs[name]) for _ in range(3)] for name, s in every_broker.items()}
    try:
        for name in every_broker:
            wait_until(lambda name=name: len(ticks(runs[name])) >= 2, timeout=20)
        begin = {name: max(ticks(runs[name])) for name in every_broker}
        end = max(begin.values()) + 60
        # Per broker: a kill in [5, 20) s, another in [25, 40) s, a restart up to 3 s after it.
        now = time.time()
        events = sorted(
            [(now + random.uniform(5, 20), "kill", name) for name in every_broker]
            + [(at := now + random.uniform(25, 40), "kill", name) for name in every_broker]
            + [(at + random.uniform(0, 3), "start", name) for name in every_broker],
        )
        for at, action, name in events:
            time.sleep(max(0.0, at - time.time()))
            if action == "kill":
                kill(workers[name].pop(random.randrange(len(workers[name]))))
            else:
                workers[name].append(spawn(every_broker[name], runs[name]))
        time.sleep(max(0.0, end - time.time()))
        # Jobs a killed worker had claimed run again once its heartbeat expires.
        for name in every_broker:
            wanted = set(range(begin[name], end + 1))
            wait_until(lambda name=name, wanted=wanted: wanted <= ticks(runs[name]).keys(), timeout=30)
        for proc in [p for group in workers.values() for p in group]:
            stop(proc)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    for name in every_broker:
        found = ticks(runs[name])
        window = range(begin[name], end + 1)
        assert [t for t in window if t not in found] == [], name
        assert {t: jids for t, jids in found.items() if t in window and len(jids) > 1} == {}, name


# Times what it checks: runs alone (see the marker in pyproject.toml).
@pytest.mark.alone
def test_ticks_missed_while_every_worker_was_down_follow_catch_up(
    settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    """One schedule per rule, every second, in the same workers."""
    worker = spawn_worker(concurrency=2, jobs=JOBS)
    wait_until(lambda: all(len(ticks(runs_file, rule)) >= 2 for rule in RULES), timeout=20)
    stop(worker)
    # The last tick each schedule took: a job of it may still wait in the queue, not yet run.
    lasts = {entry.name: entry.record.last for entry in PeriodicSet(settings=settings)}
    last_before = {rule: int(lasts[rule] or 0) for rule in RULES}
    # Spawned after the fifth tick since the last one taken, so that at least five were missed
    # however fast the worker starts.
    time.sleep(max(0.0, max(last_before.values()) + 5.1 - time.time()))
    worker = spawn_worker(concurrency=2, jobs=JOBS)
    processes = ProcessSet(settings=settings)
    started = wait_until(lambda: next((p.started_at for p in processes), None), timeout=20)
    wait_until(lambda: all(max(ticks(runs_file, rule)) >= int(started) + 3 for rule in RULES), timeout=20)
    stop(worker)
    found = {rule: ticks(runs_file, rule) for rule in RULES}
    # The scheduler starts a moment after its process record (its first declaration): a tick
    # between the two is missed too. One boundary, the same for every rule, must explain them all.
    outcomes = {}
    for boundary in range(int(started), int(started) + 3):
        outcome = {}
        for rule in RULES:
            missed = range(last_before[rule] + 1, boundary + 1)
            taken = [t for t in missed if t in found[rule]]
            expected = {"latest": [missed[-1]], "all": list(missed), "none": []}[rule]
            # The ticks after the start all run, whatever the rule.
            after = [t for t in found[rule] if t > boundary]
            outcome[rule] = (
                len(missed) >= 5
                and taken == expected
                and after == list(range(boundary + 1, max(found[rule]) + 1))
            )
        outcomes[boundary] = outcome
        if all(outcome.values()):
            break
    else:
        raise AssertionError((started, last_before, {r: sorted(f) for r, f in found.items()}, outcomes))


@pytest.mark.alone
def test_pause_stops_the_ticks_on_every_worker_within_a_tick_and_resume_restarts_them(
    settings: Settings, spawn_worker: SpawnWorker, runs_file: Path
) -> None:
    workers = [spawn_worker(concurrency=2, jobs=JOBS) for _ in range(2)]
    wait_until(lambda: len(ticks(runs_file)) >= 2, timeout=20)
    schedules = PeriodicSet(settings=settings)
    assert schedules.pause("latest")
    paused_at = time.time()
    time.sleep(3)
    assert schedules.resume("latest")
    resumed_at = time.time()
    wait_until(lambda: max(ticks(runs_file)) >= resumed_at + 2, timeout=20)
    for proc in workers:
        stop(proc)
    found = sorted(ticks(runs_file))
    assert [t for t in found if paused_at + 1 < t <= resumed_at] == []
    after = [t for t in found if t > resumed_at + 1]
    assert after == list(range(after[0], found[-1] + 1)) and after[0] <= resumed_at + 2
