"""A task ordered by key, end to end on every broker: its chunk jobs run one key at a time in
the order of their items (or up to the limit together), other keys meanwhile, and the read API
shows the key's holder and line while they wait."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from asynctask import Registry, Settings, Tracking, job
from asynctask.api import BusyKeys
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.worker import Worker
from tests.conftest import wait_until
from tests.tracking_fixtures import wait_for_task


class Runs:
    """What the chunk jobs did: ("start" | "end", key, first item's n), in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, int]] = []
        self.gate = threading.Event()

    def of(self, key: str) -> list[tuple[str, int]]:
        return [(what, n) for what, k, n in self.log if k == key]

    def most_at_once(self, key: str) -> int:
        running = most = 0
        for what, _ in self.of(key):
            running += 1 if what == "start" else -1
            most = max(most, running)
        return most


def start_tracked(start_worker: Callable[..., Worker]) -> Worker:
    return start_worker(
        server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread", concurrency=6
    )


@pytest.fixture(params=["sync", "async"])
def runs(request: pytest.FixtureRequest, registry: Registry) -> Runs:
    """The chunk job ``step``: a sync job, then an async one (its waits awaited)."""
    seen = Runs()

    def started(chunk: list[dict[str, Any]]) -> str:
        key = str(chunk[0]["op"])
        with seen.lock:
            seen.log.append(("start", key, chunk[0]["n"]))
        return key

    def ended(key: str, chunk: list[dict[str, Any]]) -> None:
        with seen.lock:
            seen.log.append(("end", key, chunk[0]["n"]))

    if request.param == "sync":

        @job(registry=registry, retry=False)
        def step(chunk: list[dict[str, Any]]) -> None:
            key = started(chunk)
            seen.gate.wait(10)
            time.sleep(0.02)
            ended(key, chunk)

    else:

        @job(registry=registry, retry=False, name="step")
        async def async_step(chunk: list[dict[str, Any]]) -> None:
            key = started(chunk)
            await asyncio.to_thread(seen.gate.wait, 10)
            await asyncio.sleep(0.02)
            ended(key, chunk)

    return seen


def test_a_keys_chunks_run_one_at_a_time_in_item_order(
    tracking: Tracking, runs: Runs, start_worker: Callable[..., Worker], settings: Settings
) -> None:
    items = [{"op": op, "n": n} for n, op in enumerate("abababababab")]
    task = tracking.create_task("step", items, chunk_size=2, concurrency_key="op:{op}")
    # Before any worker: each key holds one slot (its first chunk) and the rest wait in line.
    busy = sorted(BusyKeys(settings=settings).busiest(), key=lambda b: b.key)
    assert [(b.key, b.limit, len(b.holders), b.waiting) for b in busy] == [
        ("op:a", 1, 1, 2),
        ("op:b", 1, 1, 2),
    ]
    runs.gate.set()
    start_tracked(start_worker)
    done = wait_for_task(tracking, task.id)
    assert done.status == "finished" and done.total == 6
    assert runs.of("a") == [("start", 0), ("end", 0), ("start", 4), ("end", 4), ("start", 8), ("end", 8)]
    assert runs.of("b") == [("start", 1), ("end", 1), ("start", 5), ("end", 5), ("start", 9), ("end", 9)]
    assert BusyKeys(settings=settings).busiest() == []
    events = tracking.list_events(task.id).items
    assert {e.messages[0].text for e in events} == {"waiting for op:a", "waiting for op:b"}


def test_a_keys_limit_lets_that_many_run_together(
    tracking: Tracking, runs: Runs, start_worker: Callable[..., Worker], settings: Settings
) -> None:
    items = [{"op": "a", "n": n} for n in range(8)]
    task = tracking.create_task("step", items, concurrency_key="op:{op}", concurrency_limit=3)
    start_tracked(start_worker)
    # The gate holds the first jobs: exactly the limit of them start, the rest wait in line.
    wait_until(lambda: len(runs.of("a")) == 3, 10)
    time.sleep(0.3)
    assert sorted(runs.of("a")) == [("start", 0), ("start", 1), ("start", 2)]
    (busy,) = BusyKeys(settings=settings).busiest()
    assert (busy.key, busy.limit, len(busy.holders), busy.waiting) == ("op:a", 3, 3, 5)
    runs.gate.set()
    assert wait_for_task(tracking, task.id).status == "finished"
    assert runs.most_at_once("a") == 3
    assert sorted(n for what, n in runs.of("a") if what == "start") == list(range(8))
