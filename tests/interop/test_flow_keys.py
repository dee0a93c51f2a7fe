"""A job pushed with flow-control options stays a Sidekiq job: a real Ruby ``sidekiq`` reads
and performs it, ignoring the extra payload keys (it neither honours limits nor frees slots,
the documented limitation, so each key here has one job)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

import asynctask
from asynctask import Client, Registry, Settings
from tests.conftest import wait_until
from tests.interop.conftest import Services
from tests.interop.test_python_to_ruby import RUBY_PERFORMED_KEY, ruby_performed

pytestmark = pytest.mark.interop


def test_sidekiq_performs_jobs_pushed_with_a_concurrency_key(
    redis_url: str, db: redis.Redis, services: Services
) -> None:
    registry = Registry()

    @asynctask.job(name="InteropWorker", registry=registry, concurrency_key="device:{0}", concurrency_limit=2)
    def interop_worker(*args: Any) -> None:
        raise AssertionError("InteropWorker runs in Ruby, never here")

    client = Client(Settings(redis_url=redis_url), connection=db, registry=registry)
    pushed = {interop_worker.set(client=client).perform_async(f"d{n}", n): [f"d{n}", n] for n in range(3)}
    # What Sidekiq will read: the queue holds ordinary Sidekiq JSON carrying the resolved key.
    queued = [json.loads(raw) for raw in db.lrange("queue:default", 0, -1)]
    assert sorted(job["concurrency_key"] for job in queued) == ["device:d0", "device:d1", "device:d2"]
    assert {job["jid"] for job in queued} == set(pushed)
    assert all(job["class"] == "InteropWorker" and job["concurrency_limit"] == 2 for job in queued)

    services.sidekiq()
    wait_until(lambda: db.llen(RUBY_PERFORMED_KEY) >= len(pushed), timeout=15)
    assert {record["jid"]: record["args"] for record in ruby_performed(db)} == pushed
    wait_until(lambda: int(db.get("stat:processed") or 0) >= len(pushed), timeout=15)
    assert int(db.get("stat:failed") or 0) == 0
    assert db.zcard("retry") == 0 and db.zcard("dead") == 0
