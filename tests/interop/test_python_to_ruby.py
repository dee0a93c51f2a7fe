"""Jobs pushed by AsyncTask's client are performed by a real Ruby ``sidekiq`` process."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.job import JobSetter
from tests.conftest import wait_until
from tests.interop.conftest import Services
from tests.interop.test_ruby_to_python import RICH_ARGS

pytestmark = pytest.mark.interop

#: Where ruby/interop_worker.rb records each job it performed.
RUBY_PERFORMED_KEY = "interop:ruby-performed"


@pytest.fixture
def interop_worker(redis_url: str, db: redis.Redis) -> JobSetter:
    """The Python-side handle of the Ruby class ``InteropWorker``, pushing to this test's database."""
    registry = Registry()

    @asynctask.job(name="InteropWorker", registry=registry)
    def interop_worker(*args: Any) -> None:
        raise AssertionError("InteropWorker runs in Ruby, never here")

    return interop_worker.set(client=Client(Settings(redis_url=redis_url), connection=db, registry=registry))


def ruby_performed(db: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in db.lrange(RUBY_PERFORMED_KEY, 0, -1)]


def test_perform_async_is_performed_by_sidekiq(
    interop_worker: JobSetter, services: Services, db: redis.Redis
) -> None:
    services.sidekiq()
    jid = interop_worker.perform_async(*RICH_ARGS)
    other = interop_worker.perform_async("second", {"nested": {"list": [1, None, "ü"]}})

    wait_until(lambda: db.llen(RUBY_PERFORMED_KEY) >= 2, timeout=15)
    by_jid = {record["jid"]: record for record in ruby_performed(db)}
    assert set(by_jid) == {jid, other}
    assert by_jid[jid]["args"] == RICH_ARGS
    assert [type(v) for v in by_jid[jid]["args"]] == [type(v) for v in RICH_ARGS]
    assert by_jid[other]["args"] == ["second", {"nested": {"list": [1, None, "ü"]}}]
    # Sidekiq counted them as processed, not failed (its heartbeat flushes every 5 s).
    wait_until(lambda: int(db.get("stat:processed") or 0) >= 2, timeout=15)
    assert int(db.get("stat:failed") or 0) == 0
    assert db.zcard("retry") == 0 and db.zcard("dead") == 0


def test_perform_in_is_performed_by_sidekiq(
    interop_worker: JobSetter, services: Services, db: redis.Redis
) -> None:
    services.sidekiq()
    pushed_at = time.time()
    jid = interop_worker.perform_in(1, "later", 2.5, {"ü": None})
    [(member, raw_score)] = db.zrange("schedule", 0, -1, withscores=True)
    score = float(raw_score)
    assert json.loads(member)["jid"] == jid
    assert pushed_at + 0.9 <= score <= time.time() + 1.1

    # Sidekiq's poller (poll_interval_average = 1 in interop_worker.rb) moves it to the queue.
    wait_until(lambda: db.llen(RUBY_PERFORMED_KEY) >= 1, timeout=30, interval=0.1)
    [record] = ruby_performed(db)
    assert record["jid"] == jid
    assert record["args"] == ["later", 2.5, {"ü": None}]
    assert record["performed_at"] >= score
    assert db.zcard("schedule") == 0
