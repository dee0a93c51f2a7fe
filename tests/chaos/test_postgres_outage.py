"""A drain on the PostgreSQL broker through two outages of the server, then a worker's kill -9.

The server is stopped (immediately: a crash, as an outage is) twice for 10 s while two
workers drain, then one worker is killed. Every job must run, and nothing may be left: no
row still queued or locked (by a live process no thread of which runs it, or by the dead
one), no expired process record; and a job scheduled afterwards runs (the pollers lived).
"""

from __future__ import annotations

import time

import pytest

from tests.chaos.drain import Drain, check, scheduled_job_runs, settle
from tests.chaos.state import SqlState
from tests.chaos.workers import Runs, Timing, WorkerPool
from tests.pg_instance import PrivatePostgres

DRAIN = Drain(jobs=10_000, pause_ms=30, timing=Timing(heartbeat=2.0, ttl=10, poll=1.0), runs_between=1000)
OUTAGES = 2
OUTAGE_SECONDS = 10.0


@pytest.mark.slow
def test_a_drain_survives_postgres_stopped_twice_then_a_worker_killed(
    postgres_state: SqlState, postgres_server: PrivatePostgres, pool: WorkerPool, runs: Runs
) -> None:
    workers, jids = DRAIN.start(pool, postgres_state, runs)
    stalls = []
    progress = []
    for _ in range(OUTAGES):
        postgres_server.stop()
        time.sleep(OUTAGE_SECONDS)
        postgres_server.start()
        progress.append(runs.count_done())
        if not runs.wait_done(progress[-1] + DRAIN.runs_between, 60):
            stalls.append(f"no progress within 60 s after the restart at {progress[-1]} runs")

    _, last_fault, killed_at = DRAIN.kill_the_recovered(pool, workers, runs)

    outcome = settle(postgres_state, runs, jids, last_fault, DRAIN.timing, pool)
    print(
        f"\npostgres outage drain: {outcome.jobs} jobs, {outcome.duplicates} run twice, "
        f"{outcome.settled_after:.1f} s from the last fault to settled; done at the restarts {progress}, "
        f"at the kill {killed_at}; peer recoveries (pid, jobs): {[w.recovered_from() for w in workers]}"
    )
    check([*stalls, outcome.failure, scheduled_job_runs(postgres_state, runs, pool)], pool)
