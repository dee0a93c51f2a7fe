"""A drain on Redis through a long pause of the server, a kill -9 of it, and a kill -9 of a worker.

Redis paused (SIGSTOP) longer than the process TTL makes every worker's process record
expire while the workers live: after the pause one of them returns the other's in-flight
jobs and drops its registration, as it would for a dead process. Then Redis is killed and
restarted from its append-only file, the same again. Then a worker is killed for real: the
one a peer recovered from (the worst case: if it never registered its lists again, nobody
can return what it held). Every job must still run, nothing may be left anywhere, and a job
scheduled after all that must run (the pollers outlived the outages).
"""

from __future__ import annotations

import pytest

from tests.chaos.drain import Drain, check, scheduled_job_runs, settle
from tests.chaos.redis_server import PrivateRedis, pause_then_kill
from tests.chaos.state import RedisState
from tests.chaos.workers import Runs, Timing, WorkerPool

#: Jobs of up to 30 ms: the 20 threads need most of a minute of running time for the whole
#: drain, so it spans every fault.
DRAIN = Drain(jobs=20_000, pause_ms=30, timing=Timing(heartbeat=2.0, ttl=10, poll=1.0), runs_between=1500)
PAUSED_SECONDS = 20.0
STOPPED_SECONDS = 15.0


@pytest.mark.slow
def test_a_drain_survives_redis_paused_then_killed_then_a_worker_killed(
    redis_state: RedisState, redis_server: PrivateRedis, pool: WorkerPool, runs: Runs
) -> None:
    workers, jids = DRAIN.start(pool, redis_state, runs)
    outages = pause_then_kill(redis_server, runs, PAUSED_SECONDS, STOPPED_SECONDS, DRAIN.runs_between)

    victim, last_fault, killed_at = DRAIN.kill_the_recovered(pool, workers, runs)
    survivor = next(worker for worker in workers if worker is not victim)
    assert survivor.alive(), f"a worker exited on its own\n{pool.logs()}"

    outcome = settle(redis_state, runs, jids, last_fault, DRAIN.timing, pool)
    print(
        f"\nredis outage drain: {outcome.jobs} jobs, {outcome.duplicates} run twice, "
        f"{outcome.settled_after:.1f} s from the last fault to settled; done at the end of the pause "
        f"{outages.after_pause}, at the restart {outages.after_restart}, at the kill {killed_at}; "
        f"peer recoveries (pid, jobs): {[w.recovered_from() for w in workers]}"
    )
    check(
        [
            None if outages.progressed_after_pause else "no progress within 60 s after the pause",
            None if outages.progressed_after_restart else "no progress within 60 s after the restart",
            outcome.failure,
            scheduled_job_runs(redis_state, runs, pool),
        ],
        pool,
    )
