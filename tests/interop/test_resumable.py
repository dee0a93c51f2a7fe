"""A resumable job pushed by Ruby's ``Sidekiq::Client``: run by ``asynctask worker``, stopped and
resumed by jid, with Sidekiq's JSON all along (a stopped job's payload gains a ``cursor`` only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from asynctask import Client, Settings
from asynctask.api import StoppedSet
from asynctask.db.migrate import upgrade
from asynctask.tasks.jobs import StopState
from asynctask.tasks.service import Tracking
from tests.conftest import wait_until
from tests.interop.conftest import RunRuby, Services
from tests.interop.interop_jobs import COUNTED_KEY

pytestmark = pytest.mark.interop

TOTAL = 150


def test_a_ruby_pushed_resumable_job_stops_and_resumes_with_sidekiq_json(
    ruby: RunRuby, services: Services, db: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    [jid] = ruby("push.rb", stdin=[{"class": "InteropCounter", "args": [TOTAL]}])
    pushed = json.loads(db.lindex("queue:default", 0) or b"{}")
    services.python_worker()
    wait_until(lambda: db.llen(COUNTED_KEY) >= 20, timeout=15)

    database = f"sqlite:///{tmp_path / 'tracking.db'}"
    upgrade(database)
    client = Client(Settings(redis_url=redis_url, database_url=database), connection=db)
    tracking = Tracking(client)
    assert tracking.stop_job(jid) == StopState.STOPPING
    stopped = StoppedSet(settings=client.settings)
    entry = wait_until(lambda: stopped.find_job(jid), timeout=10)
    parked = json.loads(entry.raw)
    assert set(parked) == {*pushed, "cursor"}, "a stopped job's payload gains its cursor only"
    assert {k: v for k, v in parked.items() if k != "cursor"} == pushed
    assert parked["cursor"] == int(db.lindex(COUNTED_KEY, -1) or -1)

    assert tracking.resume_job(jid) == "default"
    wait_until(lambda: db.llen(COUNTED_KEY) >= TOTAL, timeout=20)
    assert [int(i) for i in db.lrange(COUNTED_KEY, 0, -1)] == list(range(TOTAL))
    tracking.engine.dispose()
