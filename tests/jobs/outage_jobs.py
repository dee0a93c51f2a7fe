"""The job of the SQL outage test (``tests/tracking/test_outage.py``), run by worker subprocesses
loaded with ``asynctask worker -r tests/jobs/outage_jobs.py``.

Each job gets a chunk of one item ``{"n": n, "kind": k, "ms": pause}``. Every run is recorded
in Redis, not SQL, because SQL is what the test takes away: the jid goes into the set named by
``OUTAGE_TEST_RUNS_KEY`` and the hash ``<that key>:count`` counts runs per jid. The test process
imports this module too (for the job's definition), so the environment is read at run time.
"""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import redis

from asynctask import JobFailed, current_job, job

_lock = threading.Lock()
_conn: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _conn
    with _lock:
        if _conn is None:
            _conn = redis.Redis.from_url(os.environ["ASYNCTASK_REDIS_URL"])
        return _conn


@job(retry=1)
def outage_chunk(items: list[dict[str, Any]]) -> None:
    item = items[0]
    context = current_job()
    key = os.environ["OUTAGE_TEST_RUNS_KEY"]
    pipe = _redis().pipeline(transaction=True)
    pipe.sadd(key, context.jid)
    pipe.hincrby(f"{key}:count", context.jid, 1)
    pipe.execute()
    # Long enough that the task's jobs are still running while the test keeps SQL down.
    time.sleep(item["ms"] / 1000)
    if item["kind"] == "fail":
        raise JobFailed(f"item {item['n']} rejected")
    if item["kind"] == "boom" and context.retry_count is None:
        raise RuntimeError(f"item {item['n']} exploded")


@outage_chunk.retry_in
def _soon(count: int, exc: BaseException, job: dict[str, Any]) -> float:
    # The runtime adds Sidekiq's jitter (up to 9 s) to this; keep the base small.
    return 0.1 + random.random() / 10
