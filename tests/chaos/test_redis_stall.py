"""A worker that stalls (SIGSTOP) longer than the process TTL, then lives on, then dies.

While it is stopped its process record expires, and its peer returns the jobs it held to
the queue, as a dead process's. It is not dead: once resumed it claims more jobs into its
in-flight list. When it is then killed for real, those jobs must come back too, once its
record expires again: a process recovered from has to be recoverable again.
"""

from __future__ import annotations

import time

import pytest

from tests.chaos.drain import check, settle
from tests.chaos.state import RedisState, push_drain
from tests.chaos.workers import Runs, Timing, WorkerPool
from tests.conftest import wait_until

TIMING = Timing(heartbeat=1.0, ttl=5, poll=1.0)
JOBS = 2000
#: 4 threads a worker, up to 100 ms a job: the peer alone cannot drain the queue while the
#: other is stopped, so the resumed worker finds jobs to claim.
CONCURRENCY = 4
PAUSE_MS = 100
#: Runs the resumed worker records before it is killed: it is claiming again.
RUNS_AFTER_RESUME = 40


@pytest.mark.slow
def test_jobs_claimed_after_a_stall_are_recovered_when_the_worker_dies(
    redis_state: RedisState, pool: WorkerPool, runs: Runs
) -> None:
    staller, peer = pool.start(redis_state, TIMING, concurrency=CONCURRENCY)
    identity = redis_state.identity_of(staller.pid)
    assert identity is not None
    jids = push_drain(redis_state.settings, JOBS, PAUSE_MS)

    assert runs.wait_done(100, 30), f"the drain did not start\n{pool.logs()}"
    staller.stall()
    held = redis_state.in_flight(identity)
    assert held, "the stalled worker held no job: the stall tests nothing"
    stalled_at = time.monotonic()
    # The peer takes the stalled worker for dead once its record expired.
    wait_until(lambda: any(pid == staller.pid for pid, _ in peer.recovered_from()), timeout=TIMING.ttl + 10)
    stalled_for = time.monotonic() - stalled_at
    staller.resume()

    resumed_runs = runs.count_by(staller.pid)
    wait_until(lambda: runs.count_by(staller.pid) >= resumed_runs + RUNS_AFTER_RESUME, timeout=30)
    staller.kill9()
    last_fault = time.monotonic()
    # The dead worker's list cannot change any more: every job in it must come back.
    orphaned = redis_state.in_flight(identity)
    assert orphaned, "the killed worker held no job: the kill tests nothing"
    assert runs.count_done() < JOBS, "the drain ended before the kill: it tested nothing"

    outcome = settle(redis_state, runs, jids, last_fault, TIMING, pool)
    after_kill = {run.jid for run in runs.read() if run.event == "done" and run.by(peer.pid)}
    lost = [jid for jid in orphaned if jid not in after_kill]
    print(
        f"\nredis stall: held {len(held)} at the stall, recovered after {stalled_for:.1f} s stopped, "
        f"{len(orphaned)} in flight at the kill; {outcome.duplicates} run twice, "
        f"{outcome.settled_after:.1f} s from the kill to settled"
    )
    check(
        [
            outcome.failure,
            f"{len(lost)} of the {len(orphaned)} job(s) the killed worker held never ran on its peer"
            if lost
            else None,
        ],
        pool,
    )
