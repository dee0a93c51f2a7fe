"""Celery and RQ workers tracked through a 30 s outage of the tracking database (a private
PostgreSQL server, stopped in the middle of a 100-item task): the jobs keep running while it is
down, their transitions wait in the tracking stream, and once it is back the task ends with
exactly its items' outcomes and every event's log. Dramatiq's twin is in
tests/integrations/test_dramatiq_chaos.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from asynctask import Client, Tracking, default_registry
from asynctask.db.engine import create_database_engine
from asynctask.middleware import Chain
from tests.conftest import wait_until
from tests.integrations import rq_jobs
from tests.integrations.celery_support import CeleryRig, celery_rig
from tests.integrations.rq_support import RqStack, rq_stack
from tests.integrations.test_celery import assert_outcomes
from tests.integrations.test_rq import KINDS
from tests.pg_instance import PrivatePostgres

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 30.0
#: Runs started before the database is stopped: the outage falls in the middle of the task.
STARTED_BEFORE = 20


def through_outage(server: PrivatePostgres, starts: Callable[[], int]) -> int:
    """Stop the database once ``STARTED_BEFORE`` runs started, keep it down for
    ``OUTAGE_SECONDS``, start it again; the runs started while it was down."""
    wait_until(lambda: starts() >= STARTED_BEFORE, 30)
    server.stop()
    down_at = starts()
    time.sleep(OUTAGE_SECONDS)
    during = starts() - down_at
    server.start()
    return during


def answered(read: Callable[[], Any]) -> Callable[[], Any]:
    """``read``, with a connection the restarted server has not taken back yet read as "not yet"."""

    def attempt() -> Any:
        try:
            return read()
        except OperationalError:
            return None

    return attempt


@pytest.fixture
def celery(claimed_db: int, tmp_path: Path, postgres_server: PrivatePostgres) -> Iterator[CeleryRig]:
    with celery_rig("redis", claimed_db, tmp_path, postgres_server.url) as rig:
        yield rig


def test_celery_jobs_run_through_a_tracking_database_outage_and_their_counts_come_out_exact(
    celery: CeleryRig, postgres_server: PrivatePostgres
) -> None:
    rig = celery
    task = rig.create(rig.app.tasks["celery_jobs.paced"], range(100))
    rig.start_worker(concurrency=2)
    during = through_outage(postgres_server, lambda: len(rig.runs_of("start")))
    assert during > 0, "no job ran while the tracking database was down"
    wait_until(answered(lambda: rig.tracking.get_task(task.id).status == "finished_with_errors"), 45, 0.2)
    assert_outcomes(rig, task.id, range(100))


@pytest.fixture
def rq(
    claimed_db: int, tmp_path: Path, postgres_server: PrivatePostgres, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RqStack]:
    with rq_stack(claimed_db, tmp_path, postgres_server.url) as stack:
        # The sender of submittable() reads RQ's URL when it sends.
        monkeypatch.setenv("RQ_REDIS_URL", stack.rq_url)
        yield stack


def test_rq_jobs_run_through_a_tracking_database_outage_and_their_counts_come_out_exact(
    rq: RqStack, postgres_server: PrivatePostgres
) -> None:
    client = Client(rq.settings, registry=default_registry, middleware=Chain())
    engine = create_database_engine(rq.settings.database_url)
    tracking = Tracking(client, engine)
    try:
        task = tracking.create_task(rq_jobs.mixed_job, [{"n": n, "kind": kind} for n, kind in KINDS.items()])
        rq.spawn_worker(RQ_TEST_PAUSE="0.2")
        during = through_outage(postgres_server, lambda: len(rq.starts()))
        assert during > 0, "no job ran while the tracking database was down"
        view = wait_until(
            answered(lambda: (v := tracking.get_task(task.id)).status == "finished_with_errors" and v),
            45,
            0.2,
        )
        assert {k: v for k, v in view.counts.items() if v} == {"finish": 75, "failed": 15, "error": 10}
        events = {(e.params or [])[0][0]["n"]: e for e in tracking.list_events(task.id, limit=100).items}
        assert sorted(events) == list(KINDS)
        for n, kind in KINDS.items():
            texts = [m.text for m in events[n].messages]
            run = ["started", f"item {n}: {kind}"]
            if kind == "ok":
                assert (events[n].status, events[n].attempt, texts) == ("finish", 1, [*run, "finished"])
            elif kind == "failed":
                assert (events[n].status, events[n].attempt) == ("failed", 1)
                assert texts == [*run, f"item {n} refused"]
            else:
                crash = f"RuntimeError: item {n} broke"
                assert (events[n].status, events[n].attempt) == ("error", 3)
                assert texts == [
                    *(*run, crash, "waiting for retry 1 of 2"),
                    *(*run, crash, "waiting for retry 2 of 2"),
                    *(*run, crash, "no retries left"),
                ]
    finally:
        client.broker.close()
        engine.dispose()
