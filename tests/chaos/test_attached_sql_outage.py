"""Another runtime's jobs tracked without Redis, through a PostgreSQL outage: the worker's
writer thread keeps what the jobs record in memory while the database is down, the jobs keep
running (their cancellation check answers "not cancelled" meanwhile), and once it is back every
transition is applied: the task's counts come out exact.

The database is a private PostgreSQL server (``tests/pg_instance.py``) because the test stops it.
"""

from __future__ import annotations

import time

import pytest

from asynctask import Client, Settings, Tracking
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.integrations.attached import AttachedTracking
from asynctask.registry import Registry
from asynctask.tasks import runtime
from asynctask.tasks.runtime import RuntimeJob
from tests.brokers.test_runtime_port import ListRuntime, handle
from tests.conftest import wait_until
from tests.pg_instance import PrivatePostgres
from tests.tracking_fixtures import wait_for_task

pytestmark = pytest.mark.alone

JOBS = 40
BEFORE_OUTAGE = 10


def run_one(attached: AttachedTracking, sender: ListRuntime, name: str) -> None:
    """One job as a runtime's worker runs it, without retries: a raise ends it."""
    job = sender.queue.pop(0)
    run = attached.run(job.jid, job.task, name, job.args)
    assert run.start()
    with run:
        try:
            handle(*job.args)
        except Exception as exc:
            run.raised(exc, retry=None)
        else:
            run.finished()
    attached.flush()


def test_transitions_recorded_while_sql_is_down_are_applied_when_it_is_back(
    postgres_server: PrivatePostgres,
) -> None:
    upgrade(postgres_server.url)
    settings = Settings(broker_url=postgres_server.url, heartbeat_interval=0.5, process_ttl=3)
    engine = create_database_engine(postgres_server.url)
    client = Client(settings, registry=Registry())
    attached = AttachedTracking(settings)
    try:
        sender = ListRuntime()
        job = runtime.register(
            RuntimeJob(handle, "listed.handle", runtime="listed", queue="q", sender=sender), client.registry
        )
        tracking = Tracking(client, engine)
        # 0, 5, 10, ...: every job ends well (see ``handle``).
        task = tracking.create_task(job, [5 * n for n in range(JOBS)])
        for _ in range(BEFORE_OUTAGE):
            run_one(attached, sender, job.name)
        wait_until(lambda: tracking.get_task(task.id).counts["finish"] == BEFORE_OUTAGE, timeout=10)

        postgres_server.stop()
        while sender.queue:
            run_one(attached, sender, job.name)
        # Several of the writer's attempts fail while the database is down.
        time.sleep(2)
        postgres_server.start()

        done = wait_for_task(tracking, task.id, timeout=30)
        assert done.counts["finish"] == JOBS
        assert sum(done.counts.values()) == JOBS
        events = tracking.list_events(task.id, limit=100).items
        for event in events:
            number = (event.params or [])[0][0]
            assert [m.text for m in event.messages] == ["started", f"handling {number}", "finished"]
    finally:
        attached.close()
        client.close()
        engine.dispose()
