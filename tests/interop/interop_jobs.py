"""Jobs for the interop tests, run by a real ``asynctask worker -r tests/interop/interop_jobs.py``.

Loaded by path the module is named ``interop_jobs`` and registers its jobs in the default
registry, as a user's job module would. The tests import ``define`` to get client-side twins
of the same jobs (same names and options) in a fresh ``Registry``, for pushing.

The jobs report to the test through keys of the test's own Redis database (the worker's
``ASYNCTASK_REDIS_URL``).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from functools import cache
from typing import Any

import redis

import asynctask
from asynctask import JobDefinition, Registry

#: List of JSON arrays: the args each ``InteropRecorder`` run received, in order.
PERFORMED_KEY = "interop:performed"
#: ``InteropSleeper(token)`` holds its thread until this key plus ``:<token>`` exists.
RELEASE_KEY = "interop:release"
#: Set of the tokens of the sleepers that started.
SLEEPING_KEY = "interop:sleeping"
#: The indexes ``InteropCounter`` reached, in order, over all its runs.
COUNTED_KEY = "interop:counted"


class InteropError(RuntimeError):
    """What the failing jobs raise (error_class ``interop_jobs.InteropError`` in the worker)."""


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["ASYNCTASK_REDIS_URL"])


def _explode(message: str) -> None:
    raise InteropError(message)


def define(registry: Registry) -> dict[str, JobDefinition[Any]]:
    """Register the interop jobs in ``registry``; return them by name."""

    @asynctask.job(name="InteropRecorder", registry=registry)
    def record(*args: Any) -> None:
        _redis().rpush(PERFORMED_KEY, json.dumps(list(args), ensure_ascii=False))

    @asynctask.job(name="InteropAsyncRecorder", registry=registry)
    async def record_awaited(*args: Any) -> None:
        await asyncio.sleep(0)
        _redis().rpush(PERFORMED_KEY, json.dumps(list(args), ensure_ascii=False))

    @asynctask.job(name="InteropFailer", backtrace=True, registry=registry)
    def fail(message: str) -> None:
        _explode(message)

    @asynctask.job(name="InteropNoRetry", retry=0, registry=registry)
    def fail_now(message: str) -> None:
        raise InteropError(message)

    @asynctask.job(name="InteropSleeper", registry=registry)
    def sleep_until_released(token: str, limit: float = 30.0) -> None:
        conn = _redis()
        conn.sadd(SLEEPING_KEY, token)
        deadline = time.monotonic() + limit
        while not conn.exists(f"{RELEASE_KEY}:{token}"):
            if time.monotonic() > deadline:
                raise InteropError(f"sleeper {token} was never released")
            time.sleep(0.05)

    @asynctask.job(name="InteropCounter", registry=registry)
    def count(total: int, cursor: int | None = None) -> Iterator[int]:
        """Resumable: records each index it reaches, 20 ms apart; its cursor is the last one."""
        for index in range(0 if cursor is None else cursor + 1, total):
            time.sleep(0.02)
            _redis().rpush(COUNTED_KEY, index)
            yield index

    return {d.name: d for d in (record, record_awaited, fail, fail_now, sleep_until_released, count)}


if __name__ == "interop_jobs":  # loaded by the worker's -r
    define(asynctask.default_registry)
