"""Dramatiq workers tracked by AsyncTask through faults: a worker killed with kill -9 in the
middle of a task, and a 30 s PostgreSQL outage (a private server) in the middle of one. After
each, every transition is there and the task's counts are exact."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from asynctask import Client, Registry, Tracking
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.tracking.views import EventView
from tests.conftest import db_url, fresh_postgres_schema, wait_until
from tests.integrations.dramatiq_support import (
    ITEMS,
    Runtime,
    dramatiq_runtime,
    expected_log,
    item,
    outcome_of,
)
from tests.pg_instance import PrivatePostgres

#: How long after its last heartbeat the broker takes a worker for dead (the default is 60 s).
HEARTBEAT_MS = 3000
#: Threads of the worker killed mid-task: at most that many runs are cut short at once.
VICTIM_THREADS = 8
OUTAGE_SECONDS = 30.0


def tracking_on(runtime: Runtime, registry: Registry, engine: Engine) -> Tracking:
    return Tracking(Client(runtime.settings, registry=registry), engine)


def all_events(tracking: Tracking, task_id: str) -> list[EventView]:
    events: list[EventView] = []
    after: str | None = None
    while True:
        page = tracking.list_events(task_id, after=after, limit=500)
        events += page.items
        if page.next_cursor is None:
            return events
        after = page.next_cursor


@pytest.fixture
def database() -> Iterator[str]:
    with fresh_postgres_schema() as url:
        upgrade(url)
        yield url


@pytest.mark.alone
@pytest.mark.slow
def test_a_worker_killed_mid_task_loses_no_transition_once_its_messages_run_again(
    claimed_db: int, database: str, registry: Registry, tmp_path: Path
) -> None:
    jobs = 1500
    engine = create_database_engine(database)
    with dramatiq_runtime(db_url(claimed_db), database, tmp_path) as runtime:
        tracking = tracking_on(runtime, registry, engine)
        try:
            task_id = tracking.create_task(
                runtime.actors.import_items, [item(n, "ok", sleep=0.005) for n in range(jobs)]
            ).id
            # The stream is applied by a flusher of its own: a flusher killed with its worker
            # would leave the entries it held for another to claim a minute later.
            runtime.spawn_flusher()
            extra = {"DRAMATIQ_TEST_HEARTBEAT_MS": str(HEARTBEAT_MS), "ASYNCTASK_FLUSHER": "off"}
            victim = runtime.spawn(threads=VICTIM_THREADS, **extra)
            wait_until(lambda: len(runtime.starts()) >= 400, 30)
            runtime.kill9(victim)
            killed_at = len(runtime.starts())
            assert killed_at < jobs, "the task ended before the kill: it tested nothing"
            runtime.spawn(**extra)

            def counted() -> Any:
                view = tracking.get_task(task_id)
                return view if view.counts["finish"] == jobs else None

            view = wait_until(counted, 45, interval=0.2)
            assert view.status == "finished", runtime.worker_logs()
            assert {k: v for k, v in view.counts.items() if v} == {"finish": jobs}
            events = all_events(tracking, task_id)
            starts = Counter(jid for jid, _, _ in runtime.starts())
            rerun = [e for e in events if starts[e.job_id] > 1]
            assert rerun, "no message of the dead worker ran again: the kill tested nothing"
            for event in events:
                texts = [m.text for m in event.messages]
                # A run the worker started but never acknowledged is run again; its record may
                # lack what the kill cut short, never what an acknowledged run recorded.
                assert texts[-1] == "finished" and texts.count("finished") <= starts[event.job_id]
                assert 1 <= event.attempt <= starts[event.job_id] + 1
            # The kill may land between a run's start, recorded by tracking, and the job's own
            # note of it: at most once per thread of the killed worker.
            unnoted = [e.job_id for e in events if e.attempt > starts[e.job_id]]
            assert len(unnoted) <= VICTIM_THREADS, unnoted
            print(
                f"\nkill -9 after {killed_at} starts of {jobs}: {len(rerun)} job(s) ran again, "
                f"{sum(starts.values())} starts in all"
            )
        finally:
            tracking.client.close()
            engine.dispose()


@pytest.mark.slow
def test_a_postgres_outage_mid_task_loses_no_transition(
    claimed_db: int, postgres_server: PrivatePostgres, registry: Registry, tmp_path: Path
) -> None:
    server = postgres_server
    upgrade(server.url)
    engine = create_database_engine(server.url)
    with dramatiq_runtime(db_url(claimed_db), server.url, tmp_path) as runtime:
        tracking = tracking_on(runtime, registry, engine)
        try:
            slow = [{**row, "sleep": 0.1} for row in ITEMS]
            task_id = tracking.create_task(runtime.actors.import_items, slow).id
            runtime.spawn()
            wait_until(lambda: len(runtime.starts()) >= 20, 30)
            server.stop()
            down_at = len(runtime.starts())
            time.sleep(OUTAGE_SECONDS)
            # The jobs went on without SQL.
            during = len(runtime.starts()) - down_at
            server.start()
            assert during > 0, runtime.worker_logs()

            def settled() -> Any:
                view = tracking.get_task(task_id)
                return view if view.status == "finished_with_errors" else None

            view = wait_until(settled, 30, interval=0.2)
            assert {k: v for k, v in view.counts.items() if v} == {"finish": 75, "failed": 15, "error": 10}
            events = all_events(tracking, task_id)
            assert len(events) == 100
            for event in events:
                assert event.params is not None
                n = event.params[0][0]["n"]
                assert [m.text for m in event.messages] == expected_log(n, outcome_of(n)), (n, event)
            print(f"\npostgres outage of {OUTAGE_SECONDS:g} s: {during} run(s) made while it was down")
        finally:
            tracking.client.close()
            engine.dispose()
