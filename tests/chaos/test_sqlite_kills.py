"""A drain on the SQLite broker while workers are killed (-9) and replaced, again and again.

Each kill leaves the dead worker's claimed rows locked by it; a live worker must unlock
them once its record expired. Every job must run and nothing may be left locked, queued or
listed, and a job scheduled afterwards runs.
"""

from __future__ import annotations

import time

import pytest

from tests.chaos.drain import Drain, check, scheduled_job_runs, settle
from tests.chaos.state import SqlState
from tests.chaos.workers import Runs, Timing, WorkerPool

DRAIN = Drain(jobs=4000, pause_ms=30, timing=Timing(heartbeat=1.0, ttl=5, poll=1.0), runs_between=600)
KILLS = 3


@pytest.mark.slow
def test_a_drain_survives_repeated_kill_9_of_sqlite_workers(
    sqlite_state: SqlState, pool: WorkerPool, runs: Runs
) -> None:
    workers, jids = DRAIN.start(pool, sqlite_state, runs)

    held_at_kills = []
    for kill in range(KILLS):
        if kill:
            assert runs.wait_done(runs.count_done() + DRAIN.runs_between, 60), (
                f"the drain stalled\n{pool.logs()}"
            )
        victim = workers[kill % 2]
        held_at_kills.append(sqlite_state.locked_by_pid(victim.pid))
        victim.kill9()
        workers[kill % 2] = pool.spawn()
    last_fault = time.monotonic()
    killed_at = runs.count_done()
    assert killed_at < DRAIN.jobs, "the drain ended before the last kill: it tested nothing"
    assert any(held_at_kills), "no kill found a job claimed: they tested nothing"

    outcome = settle(sqlite_state, runs, jids, last_fault, DRAIN.timing, pool)
    print(
        f"\nsqlite kills: {outcome.jobs} jobs, {outcome.duplicates} run twice, rows locked by each "
        f"victim just before its kill {held_at_kills}, done at the last kill {killed_at}, "
        f"{outcome.settled_after:.1f} s from the last kill to settled"
    )
    check([outcome.failure, scheduled_job_runs(sqlite_state, runs, pool)], pool)
