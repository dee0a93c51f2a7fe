"""Redis killed (-9) mid-drain and restarted empty (its append-only file gone, as a Redis without
persistence restarts): the loss is noticed, said once and counted; every tracked job that
vanished is marked ``lost`` within the grace period; each task ends; new work runs.

Before: the task stayed ``running`` with an ETA and thousands of events at ``enqueue``, jobs that
finished after the restart stayed ``working`` (their transitions numbered below the old ones),
the fed task stayed ``pending``, and nothing said that data was lost.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import select

import asynctask
from asynctask import Client, Registry, Tracking
from asynctask.cli.status import read, shown
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.keys import Keys
from asynctask.middleware import Chain, TrackingClientMiddleware
from asynctask.tracking.models import Event
from tests.chaos.redis_server import PrivateRedis
from tests.chaos.state import RedisState
from tests.chaos.workers import Runs, Timing, WorkerPool
from tests.conftest import wait_until
from webapi.metrics import BrokerCollector

pytestmark = pytest.mark.slow

TIMING = Timing(heartbeat=0.5, ttl=3, poll=0.5)
GRACE = 3.0
LOST = "Redis lost its data"


def test_a_redis_restarted_empty_is_noticed_and_its_vanished_jobs_end_lost(
    redis_server: PrivateRedis, redis_state: RedisState, pool: WorkerPool, runs: Runs, tmp_path: Path
) -> None:
    settings = redis_state.settings
    upgrade(settings.database_url)
    registry = Registry()

    @asynctask.job(registry=registry, name="chaos_fed")
    def chaos_fed(chunk: list[int]) -> None: ...

    @asynctask.job(registry=registry, name="chaos_drain", track=True)
    def chaos_drain(pause_ms: int) -> None: ...

    client = Client(settings, registry=registry, middleware=Chain([TrackingClientMiddleware()]))
    engine = create_database_engine(settings.database_url)
    tracking = Tracking(client, engine)
    try:
        unfed = tracking.create_task(chaos_fed, [40] * 1200, tenant="a")
        fed = tracking.create_task(chaos_fed, [40] * 200, tenant="b", parallel=4)
        scheduled = chaos_drain.set(client=client).perform_in(600, 0)
        pool.configure(settings, TIMING)
        pool.broker_env["ASYNCTASK_LOST_GRACE"] = str(GRACE)
        worker = pool.spawn(concurrency=8)
        wait_until(lambda: len(runs.done()) >= 100, 60)

        def scheduled_status() -> str | None:
            with engine.connect() as connection:
                found = connection.execute(select(Event.status).where(Event.job_id == scheduled)).scalar()
            return None if found is None else str(found)

        # Its event is in SQL (the flusher applied its push) before Redis goes.
        wait_until(scheduled_status, 20)

        redis_server.kill()
        for stored in redis_server.root.glob("appendonly*"):
            shutil.rmtree(stored) if stored.is_dir() else stored.unlink()
        redis_server.start()
        restarted = time.time()

        def ended(task_id: str) -> Any:
            view = tracking.get_task(task_id)
            return view if view.status in ("finished", "finished_with_errors") else None

        views = [wait_until(lambda t=t: ended(t), 30, interval=0.2) for t in (unfed.id, fed.id)]
        assert time.time() - restarted < 3 * TIMING.heartbeat + GRACE + 10
        for view in views:
            assert view.counts["enqueue"] == view.counts["working"] == 0
            assert view.counts["lost"] > 0
            assert view.counts["finish"] + view.counts["lost"] == view.total
        (lost,) = tracking.list_events(unfed.id, status="lost", limit=1).items
        assert lost.messages[-1].text.startswith("lost: Redis lost its data")
        assert tracking.get_task(unfed.id).eta_seconds is None
        # The scheduled job belongs to no task: its event is read directly.
        assert scheduled_status() == "lost"

        conn = redis.Redis.from_url(settings.redis_url)
        try:
            assert int(conn.get(Keys(settings.namespace).data_losses) or 0) == 1
        finally:
            conn.close()
        assert worker.log_text().count(LOST) == 1, worker.log_tail()
        assert "Redis lost its data 1 time(s)" in shown(read(settings))
        (losses,) = [m for m in BrokerCollector(settings).collect() if m.name == "asynctask_data_losses"]
        assert losses.samples[0].value == 1

        # New work runs, and is tracked to its end.
        after = tracking.create_task(chaos_fed, [0] * 20, tenant="c")
        done = wait_until(lambda: ended(after.id), 30, interval=0.2)
        assert done.counts["finish"] == 20 and done.status == "finished"
    finally:
        client.close()
        engine.dispose()
