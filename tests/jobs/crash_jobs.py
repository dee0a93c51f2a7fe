"""Jobs for the subprocess tests: loaded with ``asynctask worker -r tests/jobs/crash_jobs.py``."""

from __future__ import annotations

import os
import random
import time

import redis

import asynctask

_namespace = os.environ["ASYNCTASK_NAMESPACE"]
_conn = redis.Redis.from_url(os.environ["ASYNCTASK_REDIS_URL"])


@asynctask.job
def record_jid(pause_ms: int) -> None:
    """Record this job's jid once it has done its (short) work."""
    time.sleep(random.random() * pause_ms / 1000)
    _conn.sadd(f"{_namespace}:test:done", asynctask.current_job().jid)


@asynctask.job
def long_job(seconds: float) -> None:
    _conn.rpush(f"{_namespace}:test:started", asynctask.current_job().jid)
    time.sleep(seconds)
    _conn.sadd(f"{_namespace}:test:done", asynctask.current_job().jid)
