"""Chunks run item by item (``asynctask.each``), on every broker: a failed item fails alone,
with its message, and the rest of its chunk goes on; a crash retries the job from the item
that crashed, not from the chunk's start; the task counts items."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import asynctask
from asynctask import JobFailed, QueueSpec, Registry, Tracking, current_job
from asynctask.items import ITEMS_FIELD
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.worker import Worker
from tests.conftest import all_pages, wait_until
from tests.tracking_fixtures import wait_for_task

ITEMS = 2000
CHUNK = 50
#: Every hundredth item breaks a business rule: 20 in all, in 20 of the 40 chunks.
BAD = {n for n in range(ITEMS) if n % 100 == 37}


def tracked_worker(start_worker: Callable[..., Worker]) -> Worker:
    return start_worker(
        server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread", queues=(QueueSpec("items"),)
    )


def sign_up_one(product: dict[str, Any]) -> None:
    if not product["eligible"]:
        raise JobFailed(f"{product['sku']} does not qualify")
    current_job().log(f"signed up {product['sku']}")


def test_a_failed_item_fails_alone_and_the_task_counts_items(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    @asynctask.job(registry=registry, queue="items")
    def sign_up(products: list[dict[str, Any]]) -> None:
        asynctask.each(products, sign_up_one)

    products = [{"sku": f"P-{n}", "eligible": n not in BAD} for n in range(ITEMS)]
    task = tracking.create_task(sign_up, products, chunk_size=CHUNK)
    assert task.items == asynctask.ItemCounts(ITEMS, 0, 0)
    assert task.progress == 0.0
    tracked_worker(start_worker)

    done = wait_for_task(tracking, task.id, timeout=120)
    assert done.counts["finish"] == ITEMS // CHUNK
    assert sum(done.counts.values()) == ITEMS // CHUNK
    assert done.items == asynctask.ItemCounts(ITEMS, ITEMS - len(BAD), len(BAD))
    assert done.status == "finished_with_errors"
    assert done.progress == 1.0

    failed = all_pages(lambda after: tracking.list_failed_items(task.id, after=after, limit=7))
    assert sorted(item.item["sku"] for item in failed) == sorted(f"P-{n}" for n in BAD)
    for item in failed:
        assert item.message == f"{item.item['sku']} does not qualify"
        assert item.position == int(item.item["sku"][2:]) % CHUNK
    events = tracking.list_events(task.id, limit=100, messages=False).items
    with_failure = [e for e in events if e.items_failed]
    assert len(with_failure) == len(BAD)
    for event in events:
        assert event.status == "finish"
        assert (event.items_done or 0) + (event.items_failed or 0) == CHUNK
        assert (event.progress_done, event.progress_total) == (CHUNK, CHUNK)


def test_a_crash_retries_the_job_from_the_item_that_crashed(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    def one(n: int) -> None:
        with lock:
            runs[n] += 1
            first = runs[n] == 1
        if n == 3:
            raise JobFailed("3 is out of stock")
        if n == 6 and first:
            raise ConnectionError("the shop's server went away")

    @asynctask.job(registry=registry, queue="items", retry=2)
    def work(chunk: list[int]) -> None:
        asynctask.each(chunk, one)

    @work.retry_in
    def _soon(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        return 0.01

    task = tracking.create_task(work, range(10), chunk_size=10)
    tracked_worker(start_worker)
    done = wait_for_task(tracking, task.id, timeout=60)
    # The items before the crash ran once; the one that crashed, twice.
    assert runs == {n: 2 if n == 6 else 1 for n in range(10)}
    assert done.counts["finish"] == 1
    assert done.items == asynctask.ItemCounts(10, 9, 1)
    (event,) = tracking.list_events(task.id).items
    assert event.attempt == 2
    assert (event.items_done, event.items_failed) == (9, 1)
    (failed,) = tracking.list_failed_items(task.id).items
    assert (failed.position, failed.item, failed.message) == (3, 3, "3 is out of stock")


def test_each_outside_tracking_returns_the_counts_and_leaves_no_trace_in_a_finished_job(
    registry: Registry, start_worker: Callable[..., Worker], client: asynctask.Client
) -> None:
    seen: list[Any] = []

    @asynctask.job(registry=registry, queue="items")
    def plain(chunk: list[int]) -> None:
        outcome = asynctask.each(chunk, lambda n: n % 2 == 0 or _fail(n))
        seen.append((outcome.done, outcome.failed, outcome.failures, dict(current_job().job)))

    plain.set(client=client).perform_async([0, 1, 2, 3])
    start_worker(queues=(QueueSpec("items"),))
    wait_until(lambda: seen, 20)
    ((done, failed, failures, job),) = seen
    assert (done, failed, failures) == (2, 2, {1: "odd 1", 3: "odd 3"})
    assert ITEMS_FIELD not in job


def _fail(n: int) -> bool:
    raise JobFailed(f"odd {n}")


@pytest.mark.parametrize("state", [[2, 1, 1], None, "x", [1, 2], [-1, 0, 0], [True, 0, 0]])
def test_a_run_starts_where_the_payload_says_only_when_it_says_it_well(
    registry: Registry, state: Any, start_worker: Callable[..., Worker], client: asynctask.Client
) -> None:
    ran: list[list[int]] = []

    @asynctask.job(registry=registry, queue="items")
    def resumed(chunk: list[int]) -> None:
        mine: list[int] = []
        asynctask.each(chunk, mine.append)
        ran.append(mine)

    extra = {} if state is None else {ITEMS_FIELD: state}
    client.push({"class": resumed.name, "args": [[10, 11, 12, 13]], "queue": "items", **extra})
    start_worker(queues=(QueueSpec("items"),))
    wait_until(lambda: ran, 20)
    assert ran == [[12, 13] if state == [2, 1, 1] else [10, 11, 12, 13]]
