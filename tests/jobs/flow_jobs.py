"""Jobs of the flow-control suite (tests/brokers/flow/), run by worker subprocesses
(``asynctask worker -r tests/jobs/flow_jobs.py``) and pushed by the test process, which
imports this module for the definitions only.

Each run is recorded as lines ``<event> <jid> <pid> <epoch time> <key> <seq> <retry_count>``
in the file named by ASYNCTASK_TEST_RUNS (opened on the first record, so that importing the
module needs no such file). ``key`` and ``seq`` are the job's first two arguments: which line
of jobs it belongs to and its place there; ``retry_count`` is -1 on a first run. Lines are
appended with one ``write`` each, whole, as in tests/jobs/broker_jobs.py.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
import time
from typing import Any

import asynctask
from asynctask.worker import retry

_lock = threading.Lock()
_runs: int | None = None


class _NoJitter(random.Random):
    """Sidekiq adds up to 9 s x (count + 1) of jitter to every retry delay: the failure tests
    would wait that long for each retry. Their worker processes retry after retry_in alone."""

    def randrange(self, *args: Any, **kwargs: Any) -> int:
        return 0


# Only in the worker processes (``asynctask worker``): the tests import this module too, and the
# test process's own retries must keep Sidekiq's jitter, which other tests check.
if "worker" in sys.argv[1:3]:
    retry.random = _NoJitter()  # type: ignore[attr-defined,assignment]


def _note(event: str, key: str, seq: int) -> None:
    global _runs
    with _lock:
        if _runs is None:
            _runs = os.open(os.environ["ASYNCTASK_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    job = asynctask.current_job()
    count = job.retry_count
    line = f"{event} {job.jid} {os.getpid()} {time.time()!r} {key} {seq} {-1 if count is None else count}\n"
    os.write(_runs, line.encode())


def _step(key: str, seq: int, seconds: float, failures: int = 0) -> None:
    """Record the start, work ``seconds``, then fail the first ``failures`` runs or record the end."""
    _note("start", key, seq)
    time.sleep(seconds)
    count = asynctask.current_job().retry_count
    if (0 if count is None else count + 1) < failures:
        _note("fail", key, seq)
        raise RuntimeError(f"{key} #{seq} fails on purpose")
    _note("done", key, seq)


async def _awaited_step(key: str, seq: int, seconds: float) -> None:
    """``_step`` of an async job: record the start, await ``seconds``, record the end."""
    _note("start", key, seq)
    await asyncio.sleep(seconds)
    _note("done", key, seq)


@asynctask.job(concurrency_key="flow:{key}", retry=5)
def lane_step(key: str, seq: int, seconds: float, failures: int = 0) -> None:
    """One job of the line of ``key`` (limit 1 unless the push says otherwise)."""
    _step(key, seq, seconds, failures)


@lane_step.retry_in
def _quickly(count: int, exc: BaseException, job: dict[str, Any]) -> float:
    return 0.2


@asynctask.job
def plain_step(key: str, seq: int, seconds: float) -> None:
    """A job with no flow option at all."""
    _step(key, seq, seconds)


#: rate_step's limit: starts per second across every process.
RATE_PER_SECOND = 20


@asynctask.job(rate_limit=f"{RATE_PER_SECOND}/s", rate_key="flow-rate")
def rate_step(key: str, seq: int, seconds: float) -> None:
    _step(key, seq, seconds)


@asynctask.job(rate_limit=f"{RATE_PER_SECOND}/s", rate_key="flow-rate")
async def async_rate_step(key: str, seq: int, seconds: float) -> None:
    """``rate_step`` as an async job: its starts count in the same window."""
    await _awaited_step(key, seq, seconds)


@asynctask.job(unique_for=60)
def unique_step(key: str, seq: int, seconds: float) -> None:
    """Unique by its arguments until it is done (or 60 s)."""
    _step(key, seq, seconds)


@asynctask.job(unique_for=60, unique_until="start")
def unique_until_start_step(key: str, seq: int, seconds: float) -> None:
    """Unique by its arguments until a worker claims it (or 60 s)."""
    _step(key, seq, seconds)


@asynctask.job(retry=5)
def feed_step(chunk: list[dict[str, Any]]) -> None:
    """A fed task's chunk job: the chunk's first item says which task (``key``), its place
    (``seq``) and how long it works (``seconds``)."""
    first = chunk[0]
    _step(str(first["key"]), int(first["seq"]), float(first["seconds"]))


@asynctask.job(retry=5)
async def async_feed_step(chunk: list[dict[str, Any]]) -> None:
    """``feed_step`` as an async job."""
    first = chunk[0]
    await _awaited_step(str(first["key"]), int(first["seq"]), float(first["seconds"]))
