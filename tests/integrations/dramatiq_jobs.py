"""Actors of the Dramatiq tests, declared on a broker given to ``declare``: the tests declare
them on a broker of their own to send, and ``dramatiq_worker`` on the workers' broker.

Each item says what its run does: ``ok`` returns, ``fail`` raises ``JobFailed``, ``crash``
raises ``RuntimeError``, ``watch`` returns once its task is cancelled (or after ``sleep``);
``sleep`` seconds first, in short naps (a time limit interrupts Python code, not a long
``time.sleep``). Every start is appended to the file named by
``ASYNCTASK_TEST_RUNS`` (``start <jid> <pid> <time>``), from inside the actor: what the
worker ran, whatever tracking recorded.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import dramatiq

import asynctask
from asynctask import JobFailed

#: The queue of the tests' actors; the tests' brokers live in namespaces of their own.
QUEUE = "imports"
#: Retries of a crashing item: a short backoff, so that three runs take milliseconds.
MAX_RETRIES = 2
TIME_LIMIT_MS = 500
NAP = 0.01
MAX_AGE_MS = 1


@dataclass(frozen=True)
class Actors:
    import_items: dramatiq.Actor[[list[dict[str, Any]]], None]
    #: ``import_items`` with a time limit of ``TIME_LIMIT_MS`` and one retry.
    limited: dramatiq.Actor[[list[dict[str, Any]]], None]
    #: ``import_items`` whose messages expire ``MAX_AGE_MS`` after they were sent.
    aged: dramatiq.Actor[[list[dict[str, Any]]], None]
    noop: dramatiq.Actor[[list[Any]], None]


def record_start(jid: str) -> None:
    path = os.environ.get("ASYNCTASK_TEST_RUNS")
    if path:
        # One write per line, appended: lines of concurrent threads and processes never mix.
        with open(path, "a") as runs:
            runs.write(f"start {jid} {os.getpid()} {time.time():.6f}\n")


def run_item(item: dict[str, Any]) -> None:
    job = asynctask.current_job()
    record_start(job.jid)
    job.log(f"item {item['n']}")
    deadline = time.monotonic() + float(item.get("sleep", 0))
    while time.monotonic() < deadline:
        if item["outcome"] == "watch" and job.cancelled:
            job.log("saw the cancel")
            break
        time.sleep(NAP)
    job.progress(1, 1)
    if item["outcome"] == "fail":
        raise JobFailed(f"item {item['n']} refused")
    if item["outcome"] == "crash":
        raise RuntimeError(f"item {item['n']} broke")


def declare(broker: dramatiq.Broker, queue: str = QUEUE) -> Actors:
    def import_items(items: list[dict[str, Any]]) -> None:
        """Import rows: one outcome per chunk (the tests send chunks of one item)."""
        for item in items:
            run_item(item)

    def noop(items: list[Any]) -> None:
        """Nothing at all."""

    return Actors(
        import_items=dramatiq.actor(
            broker=broker, queue_name=queue, max_retries=MAX_RETRIES, min_backoff=10, max_backoff=50
        )(import_items),
        limited=dramatiq.actor(
            actor_name="limited",
            broker=broker,
            queue_name=queue,
            time_limit=TIME_LIMIT_MS,
            max_retries=1,
            min_backoff=10,
            max_backoff=50,
        )(import_items),
        aged=dramatiq.actor(actor_name="aged", broker=broker, queue_name=queue, max_age=MAX_AGE_MS)(
            import_items
        ),
        noop=dramatiq.actor(broker=broker, queue_name=queue, max_retries=0)(noop),
    )
