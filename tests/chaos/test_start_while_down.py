"""A worker started while its broker is down waits for it, and works as soon as it is back.

It must not exit (a supervisor restarting it in a loop, or nobody restarting it, are both
worse than waiting), it must say that it is waiting, and once the server accepts requests
its first job must run within 2 s. SQLite has no server to be down.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from tests.chaos.accept import FirstAccept, postgres_probe, redis_probe
from tests.chaos.redis_server import PrivateRedis
from tests.chaos.state import BrokerState, RedisState, SqlState, make_client, push_one
from tests.chaos.workers import Runs, Timing, WorkerPool, WorkerProc
from tests.pg_instance import PrivatePostgres

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

TIMING = Timing(heartbeat=1.0, ttl=5, poll=1.0)
#: Seconds the broker stays down once the worker said it waits: several of its retries.
DOWN_SECONDS = 5.0
#: The longest a waiting worker may take from the server accepting to the first job running.
START_WITHIN = 2.0
#: The line a worker logs (once) when it cannot reach its broker at start, and keeps trying.
WAITING = re.compile(r"level=(warning|error) .*msg=\"?reaching the broker at \S+ failed")


def said_waiting(worker: WorkerProc) -> str | None:
    return next((line for line in worker.log_text().splitlines() if WAITING.search(line)), None)


def starts_after_outage(
    state: BrokerState,
    pool: WorkerPool,
    runs: Runs,
    stop: Callable[[], None],
    start: Callable[[], None],
    probe: Callable[[], object],
) -> None:
    pool.configure(state.settings, TIMING)
    client = make_client(state.settings)
    try:
        jid = push_one(client)
    finally:
        client.close()
    stop()
    worker = pool.spawn(4)
    deadline = time.monotonic() + 15
    while worker.alive() and said_waiting(worker) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert worker.alive(), (
        f"the worker exited (status {worker.proc.returncode}) while its broker was down\n{pool.logs()}"
    )
    line = said_waiting(worker)
    assert line is not None, f"the worker never said it was waiting for its broker\n{pool.logs()}"
    time.sleep(DOWN_SECONDS)
    assert worker.alive(), f"the worker gave up waiting\n{pool.logs()}"

    watch = FirstAccept(probe).start()
    try:
        start()
        accepted_at = watch.wait(60)
    finally:
        watch.stop()
    deadline = time.monotonic() + 30
    while (run := runs.first_done(jid)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert run is not None, f"the job did not run within 30 s of the broker's return\n{pool.logs()}"
    latency = run.at - accepted_at
    print(f"\nwaiting line: {line}\nfirst job ran {latency:.2f} s after the broker accepted")
    assert latency <= START_WITHIN, f"the first job ran {latency:.2f} s after the broker accepted"
    assert run.by(worker.pid)


@pytest.mark.slow
def test_a_worker_started_while_redis_is_down_waits_then_works(
    redis_state: RedisState, redis_server: PrivateRedis, pool: WorkerPool, runs: Runs
) -> None:
    starts_after_outage(
        redis_state, pool, runs, redis_server.kill, redis_server.start, redis_probe(redis_server.url)
    )


@pytest.mark.slow
def test_a_worker_started_while_postgres_is_down_waits_then_works(
    postgres_state: SqlState, postgres_server: PrivatePostgres, pool: WorkerPool, runs: Runs
) -> None:
    starts_after_outage(
        postgres_state,
        pool,
        runs,
        postgres_server.stop,
        postgres_server.start,
        postgres_probe(postgres_server.url),
    )
