"""A fed task on Redis through a long pause of the server, a kill -9 of it and a kill -9 of a
worker: the feed neither stalls nor loses a job.

A feed releases its next jobs in the script that ends one of its jobs, and its released
jobs are counted by jid until they end. Through the pause (longer than the process TTL, so
one worker returns the other's in-flight jobs), the restart from the append-only file and
the worker's death, every job must run, the feed must end with nothing held and nothing out,
and nothing may be left anywhere.
"""

from __future__ import annotations

import time

import pytest
import redis

import asynctask
from asynctask import Client, Registry, Tracking
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain
from tests.chaos.drain import check, settle
from tests.chaos.redis_server import PrivateRedis, pause_then_kill
from tests.chaos.state import RedisState
from tests.chaos.workers import Runs, Timing, WorkerPool

TIMING = Timing(heartbeat=2.0, ttl=10, poll=1.0)
ITEMS = 5000
PARALLEL = 12
#: Each job works up to this many milliseconds: at most PARALLEL at a time, the drain needs
#: most of a minute, so it spans every fault.
PAUSE_MS = 200
PAUSED_SECONDS = 15.0
STOPPED_SECONDS = 5.0
RUNS_BETWEEN = 400


def _registry() -> Registry:
    """The test process's definition of the workers' chunk job (tests/chaos/chaos_jobs.py),
    which it cannot import: that module opens the workers' runs file."""
    registry = Registry()

    @asynctask.job(registry=registry, name="chaos_fed")
    def chaos_fed(chunk: list[int]) -> None: ...

    return registry


def _task_jids(tracking: Tracking, task_id: str) -> list[str]:
    jids: list[str] = []
    after: str | None = None
    while True:
        page = tracking.list_events(task_id, after=after, limit=1000, messages=False)
        jids += [event.job_id for event in page.items]
        if page.next_cursor is None:
            return jids
        after = page.next_cursor


@pytest.mark.slow
def test_a_feed_survives_redis_paused_then_killed_then_a_worker_killed(
    redis_state: RedisState, redis_server: PrivateRedis, pool: WorkerPool, runs: Runs
) -> None:
    settings = redis_state.settings
    upgrade(settings.database_url)
    workers = pool.start(redis_state, TIMING, settings=settings)
    client = Client(settings, registry=_registry(), middleware=Chain())
    tracking = Tracking(client)
    try:
        task = tracking.create_task("chaos_fed", [PAUSE_MS] * ITEMS, parallel=PARALLEL)
        jids = _task_jids(tracking, task.id)
        assert len(jids) == ITEMS

        assert runs.wait_done(RUNS_BETWEEN, 60), f"the feed did not start\n{pool.logs()}"
        outages = pause_then_kill(redis_server, runs, PAUSED_SECONDS, STOPPED_SECONDS, RUNS_BETWEEN)

        workers[0].kill9()
        last_fault = time.monotonic()
        killed_at = runs.count_done()
        assert killed_at < ITEMS, "the feed ended before the last fault: it tested nothing"

        outcome = settle(redis_state, runs, jids, last_fault, TIMING, pool)
        state = client.broker.feeds.state(task.id)
        print(
            f"\nredis outage feed: {outcome.jobs} jobs, {outcome.duplicates} run twice, "
            f"{outcome.settled_after:.1f} s from the last fault to settled; done at the end of the pause "
            f"{outages.after_pause}, at the restart {outages.after_restart}, at the kill {killed_at}; "
            f"feed after: {state}"
        )
        feed_left = None if state is None or (state.held, state.out) == (0, 0) else f"feed left: {state}"
        check(
            [
                None if outages.progressed_after_pause else "no progress within 60 s after the pause",
                None if outages.progressed_after_restart else "no progress within 60 s after the restart",
                outcome.failure,
                feed_left,
            ],
            pool,
        )
    finally:
        client.close()
        tracking.engine.dispose()


def test_a_finished_feed_leaves_nothing_held_or_out(redis_state: RedisState) -> None:
    """The check the outage test relies on sees a feed's keys: a held or out job is a leftover."""
    conn = redis.Redis.from_url(redis_state.settings.redis_url)
    keys = redis_state.keys
    try:
        conn.rpush(keys.feed_held("t"), b"x")
        conn.hset(keys.feed_out("u"), "jid", "default")
        left = redis_state.leftovers()
    finally:
        conn.delete(keys.feed_held("t"), keys.feed_out("u"))
        conn.close()
    assert any("feed-held:t" in line for line in left) and any("feed-out:u" in line for line in left)
