"""The scheduled/retry poller outlives a broker outage longer than its poll interval.

After the outage, in the same worker, a job scheduled a few seconds ahead and a job that
fails once (so that it waits in the retry set) must both be moved to the queue and run.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.chaos.drain import SLACK
from tests.chaos.redis_server import PrivateRedis
from tests.chaos.state import FLAKY_JOB, BrokerState, RedisState, SqlState, make_client, push_one
from tests.chaos.workers import Runs, Timing, WorkerPool
from tests.conftest import wait_until
from tests.pg_instance import PrivatePostgres

TIMING = Timing(heartbeat=1.0, ttl=5, poll=1.0)
#: Longer than the longest wait between two polls (1.5 x the interval, one process).
OUTAGE_SECONDS = 5.0
SCHEDULED_AHEAD = 3.0
#: The first retry is due within 0.1 s (the job's retry_in) plus Sidekiq's jitter, up to 9 s.
RETRY_WITHIN = 0.1 + 9
POLL_WITHIN = 1.5 * TIMING.poll


def poller_survives(
    state: BrokerState, pool: WorkerPool, runs: Runs, stop: Callable[[], None], start: Callable[[], None]
) -> None:
    [worker] = pool.start(state, TIMING, count=1, concurrency=4)
    client = make_client(state.settings)
    try:
        stop()
        time.sleep(OUTAGE_SECONDS)
        start()
        # Readiness: the worker fetches again (a job pushed now runs).
        ready = push_one(client)
        try:
            wait_until(lambda: runs.first_done(ready), timeout=30)
        except AssertionError:
            where = state.locate([ready])
            raise AssertionError(
                f"the job pushed after the outage did not run (it is in {where})\n{pool.logs()}\n"
                + worker.thread_stacks()
            ) from None
        scheduled = push_one(client, at=time.time() + SCHEDULED_AHEAD)
        flaky = push_one(client, FLAKY_JOB)
    finally:
        client.close()
    bound = max(SCHEDULED_AHEAD, RETRY_WITHIN) + POLL_WITHIN + SLACK
    deadline = time.monotonic() + bound
    while not (runs.first_done(scheduled) and runs.first_done(flaky)) and time.monotonic() < deadline:
        time.sleep(0.05)
    where = state.locate([scheduled, flaky])
    missing = [
        f"the {what} job did not run within {bound:.1f} s (it is in {where.get(jid)})"
        for what, jid in (("scheduled", scheduled), ("retried", flaky))
        if runs.first_done(jid) is None
    ]
    assert not missing, "\n".join(missing) + f"\n{pool.logs()}"
    attempts = [run for run in runs.read() if run.jid == flaky]
    assert [run.event for run in attempts] == ["failed", "done"]
    scheduled_run = runs.first_done(scheduled)
    assert scheduled_run is not None
    assert all(run.by(worker.pid) for run in [*attempts, scheduled_run]), "another process ran them"
    assert worker.alive()


@pytest.mark.slow
def test_the_poller_survives_a_redis_outage(
    redis_state: RedisState, redis_server: PrivateRedis, pool: WorkerPool, runs: Runs
) -> None:
    poller_survives(redis_state, pool, runs, redis_server.kill, redis_server.start)


@pytest.mark.slow
def test_the_poller_survives_a_postgres_outage(
    postgres_state: SqlState, postgres_server: PrivatePostgres, pool: WorkerPool, runs: Runs
) -> None:
    poller_survives(postgres_state, pool, runs, postgres_server.stop, postgres_server.start)
