"""Enqueue and run on every backend: args, queue order (strict, weighted, priority), schedule."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.api import Queue, ScheduledSet
from asynctask.settings import QueueSpec
from asynctask.worker import Worker
from tests.brokers.conftest import JobKind, MakeClient
from tests.conftest import marked_queues, wait_until

StartWorker = Callable[..., Worker]

#: Values whose JSON is easy to get wrong on the way through a store: non-ASCII and
#: non-BMP text, escapes and control characters (NUL is invalid in PostgreSQL text unless
#: escaped), integers past 64 bits, floats Ruby spells differently, nesting, empties.
AWKWARD_ARGS: list[Any] = [
    "ünïcödé ✓ 日本語 😀",
    "",
    'quote " backslash \\ slash / newline \n tab \t NUL \x00 unit separator \x1f',
    "looks like 1e+20",
    2**64 + 1,
    -(2**70),
    0,
    0.1,
    -0.0,
    1e20,
    -2.5e-300,
    3.141592653589793,
    True,
    False,
    None,
    [],
    {},
    {"nested": [1, [2, [3, {"deep": {"ß": [None, 1.5, "x"]}}]]], "ключ": "значение", "": [{}]},
]


def test_a_job_runs_with_its_context_and_leaves_the_queue(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker, job_kind: JobKind
) -> None:
    seen: list[tuple[Any, ...]] = []

    @asynctask.job(registry=registry)
    @job_kind
    def add(a: int, b: int) -> None:
        ctx = asynctask.current_job()
        seen.append((a + b, ctx.jid, ctx.queue, ctx.retry_count))

    jid = add.set(client=client).perform_async(1, 2)
    queue = Queue("default", settings=settings)
    assert queue.size == 1
    worker = start_worker()
    wait_until(lambda: seen)
    # The queue empties as soon as the job is claimed; only the acknowledgement releases the
    # worker's claim. An unacknowledged claim would be given back (and the job run again) by
    # the heartbeat's claim check, so nothing holds the job any more once both are empty.
    wait_until(lambda: not worker.fetch.held() and queue.size == 0)
    assert seen == [(3, jid, "default", None)]


@pytest.mark.parametrize(
    ("pushers", "pushes", "concurrency"),
    # Threads as the client's pools hold by default; more, with a concurrency to match.
    [(8, 200, None), (24, 50, 24)],
)
def test_threads_sharing_one_client_push_every_job_exactly_once(
    registry: Registry,
    make_client: MakeClient,
    settings: Settings,
    pushers: int,
    pushes: int,
    concurrency: int | None,
) -> None:
    @asynctask.job(registry=registry)
    def record(thread: int, n: int) -> None: ...

    client = make_client() if concurrency is None else make_client(concurrency=concurrency)
    pushing = record.set(client=client)
    together = threading.Barrier(pushers)

    def push(thread: int) -> list[str]:
        together.wait()
        return [pushing.perform_async(thread, n) for n in range(pushes)]

    with ThreadPoolExecutor(pushers) as pool:
        pushed = [jid for jids in pool.map(push, range(pushers)) for jid in jids]
    queued = list(Queue("default", settings=settings))
    assert Counter(tuple(job.args) for job in queued) == Counter(
        (thread, n) for thread in range(pushers) for n in range(pushes)
    )
    assert Counter(job.jid for job in queued) == Counter(pushed)
    assert len(set(pushed)) == pushers * pushes


def test_args_round_trip_exactly(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    seen: list[list[Any]] = []

    @asynctask.job(registry=registry)
    def echo(*values: Any) -> None:
        seen.append(list(values))

    jid = echo.set(client=client).perform_async(*AWKWARD_ARGS)
    echo.set(client=client).perform_bulk([AWKWARD_ARGS])
    found = Queue("default", settings=settings).find_job(jid)
    assert found is not None and repr(found.args) == repr(AWKWARD_ARGS)
    start_worker()
    wait_until(lambda: len(seen) == 2)
    # repr tells 1 from 1.0 and -0.0 from 0.0, which == does not.
    assert repr(seen) == repr([AWKWARD_ARGS, AWKWARD_ARGS])


def test_strict_queues_drain_in_order_and_each_queue_first_in_first_out(
    registry: Registry, client: Client, start_worker: StartWorker
) -> None:
    order: list[tuple[str, int]] = []

    @asynctask.job(registry=registry)
    def mark(queue: str, n: int) -> None:
        order.append((queue, n))

    for queue in ("low", "high"):
        mark.set(client=client, queue=queue).perform_bulk([[queue, n] for n in range(30)])
    start_worker(queues=(QueueSpec("high"), QueueSpec("low")), concurrency=1)
    wait_until(lambda: len(order) == 60)
    assert order == [("high", n) for n in range(30)] + [("low", n) for n in range(30)]


def test_weighted_queues_are_picked_in_proportion(
    registry: Registry, client: Client, start_worker: StartWorker
) -> None:
    order = marked_queues(registry, client, {"critical": 1200, "default": 1200})
    start_worker(queues=(QueueSpec("critical", 3), QueueSpec("default", 1)), concurrency=1)
    wait_until(lambda: len(order) >= 800, timeout=30)
    share = order[:800].count("critical") / 800
    # Weight 3 against 1: critical comes first with probability 3/4 at each claim. A claim takes
    # up to 6 jobs of its first queue that has any: 800 jobs are 130 claims or more, and the
    # bounds are four standard deviations of the share away.
    assert 0.6 < share < 0.9, share
    wait_until(lambda: len(order) == 2400, timeout=60)


def test_lower_priority_runs_first_within_a_queue(
    backend: str, registry: Registry, client: Client, start_worker: StartWorker
) -> None:
    if backend == "redis":
        pytest.skip("a Redis queue is a list (Sidekiq's wire format): it has no priority, only FIFO")
    order: list[str] = []

    @asynctask.job(registry=registry)
    def mark(name: str) -> None:
        order.append(name)

    for name, priority in [("p5-a", 5), ("p0-a", 0), ("p9", 9), ("p0-b", 0), ("p-1", -1), ("p5-b", 5)]:
        mark.set(client=client, priority=priority).perform_async(name)
    mark.set(client=client).perform_async("none")  # no priority given: 0
    start_worker(concurrency=1)
    wait_until(lambda: len(order) == 7)
    assert order == ["p-1", "p0-a", "p0-b", "none", "p5-a", "p5-b", "p9"]


def test_scheduled_jobs_run_when_due_and_not_before(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    ran: dict[str, tuple[float, float]] = {}

    @asynctask.job(registry=registry)
    def later(name: str) -> None:
        ran[name] = (time.time(), asynctask.current_job().job["enqueued_at"])

    now = time.time()
    due = {"in": now + 1.0, "at": now + 1.5, "datetime": now + 2.0, "past": now - 60}
    scheduling = later.set(client=client)
    scheduling.perform_in(1.0, "in")
    scheduling.perform_at(due["at"], "at")
    scheduling.perform_at(datetime.fromtimestamp(due["datetime"], UTC), "datetime")
    scheduling.perform_at(due["past"], "past")
    far = scheduling.perform_in(3600, "far")
    scheduled = ScheduledSet(settings=settings)
    assert scheduled.size == 4
    assert Queue("default", settings=settings).size == 1  # a time in the past: queued at once

    start_worker()
    wait_until(lambda: len(ran) == 4, timeout=10)
    for name, (started, enqueued_at) in ran.items():
        assert due[name] <= started < max(due[name], now) + 3, name
        if name != "past":
            # Moved to its queue when due, with a fresh enqueued_at, as Sidekiq's poller does.
            assert enqueued_at >= due[name], name
    [entry] = list(scheduled)
    assert entry.jid == far and entry.args == ["far"]
    assert entry.score == pytest.approx(now + 3600, abs=5)
    assert "far" not in ran
