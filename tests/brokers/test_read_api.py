"""The read API's actions on every backend: queues, and the retry, dead and scheduled sets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import asynctask
from asynctask import Client, Registry, Settings, payload
from asynctask.api import DeadSet, Queue, RetrySet, ScheduledSet, Stats
from asynctask.api.sorted_sets import SortedEntry
from asynctask.worker import Worker
from tests.conftest import wait_until

StartWorker = Callable[..., Worker]


def test_queue_size_find_iterate_delete_and_clear(
    registry: Registry, client: Client, settings: Settings
) -> None:
    @asynctask.job(registry=registry)
    def work(n: int) -> None: ...

    before = payload.now()
    jids = work.set(client=client).perform_bulk([[1], [2], [3]])
    other = work.set(client=client, queue="other").perform_async(4)
    queue = Queue("default", settings=settings)

    assert queue.size == 3
    assert [record.jid for record in queue] == list(reversed(jids))  # newest first, as Sidekiq lists
    found = queue.find_job(jids[1])
    assert found is not None and found.args == [2] and found.klass == "work"
    assert found.enqueued_at is not None and before <= found.enqueued_at <= payload.now()
    assert queue.find_job("0" * 24) is None
    assert 0 <= queue.latency < 10
    assert {"default", "other"} <= {q.name for q in Queue.all(settings=settings)}

    assert found.delete() is True
    assert queue.size == 2 and queue.find_job(jids[1]) is None
    assert queue.clear() == 2
    assert queue.size == 0 and queue.latency == 0
    [left] = list(Queue("other", settings=settings))
    assert left.jid == other


@dataclass
class FailedOnce:
    """A job that failed its first run and waits in the retry set; ``runs``: (jid, retry_count)
    of each of its runs, as they start."""

    jid: str
    runs: list[tuple[str, int | None]]
    retries: RetrySet
    entry: SortedEntry


def failed_once(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> FailedOnce:
    runs: list[tuple[str, int | None]] = []

    @asynctask.job(registry=registry)
    def fails_once() -> None:
        current = asynctask.current_job()
        runs.append((current.jid, current.retry_count))
        if len(runs) == 1:
            raise ValueError("first time")

    jid = fails_once.set(client=client).perform_async()
    start_worker()
    retries = RetrySet(settings=settings)
    [entry] = wait_until(lambda: list(retries))
    return FailedOnce(jid, runs, retries, entry)


def test_retry_now_runs_a_retry_at_once_and_only_once(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    failed = failed_once(registry, client, settings, start_worker)
    jid, retries, entry = failed.jid, failed.retries, failed.entry
    assert entry.jid == jid and entry.score > payload.now() + 10
    assert entry.retry() is True
    wait_until(lambda: len(failed.runs) == 2)
    # "Retry now" takes one off retry_count, so the next failure counts as the same attempt.
    assert [count for _, count in failed.runs] == [None, -1]
    assert entry.retry() is False  # already moved
    assert retries.size == 0


def test_kill_moves_a_retry_to_the_dead_set_where_it_can_be_retried_or_deleted(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    failed = failed_once(registry, client, settings, start_worker)
    jid, retries, entry = failed.jid, failed.retries, failed.entry
    assert entry.kill() is True
    assert entry.kill() is False
    dead = DeadSet(settings=settings)
    [buried] = list(dead)
    assert (buried.jid, buried.error_message, retries.size) == (jid, "first time", 0)

    other = {"class": "fails_once", "args": [], "jid": payload.new_jid(), "queue": "default", "retry": True}
    dead.kill(other)
    assert dead.size == 2 and dead.find_job(other["jid"]) is not None
    added = dead.find_job(other["jid"])
    assert added is not None and added.delete() is True and added.delete() is False
    assert dead.size == 1

    assert buried.retry() is True
    wait_until(lambda: [ran for ran, _ in failed.runs] == [jid, jid])
    assert dead.size == 0 and buried.retry() is False
    wait_until(lambda: Stats(settings=settings).enqueued == 0)


def test_add_to_queue_runs_a_scheduled_job_now(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    ran: list[str] = []

    @asynctask.job(registry=registry)
    def later() -> None:
        ran.append(asynctask.current_job().jid)

    jid = later.set(client=client).perform_in(3600)
    start_worker()
    scheduled = ScheduledSet(settings=settings)
    entry = scheduled.find_job(jid)
    assert entry is not None and entry.score > payload.now() + 3500
    assert ran == []
    assert entry.add_to_queue() is True
    assert entry.add_to_queue() is False
    wait_until(lambda: ran == [jid])
    assert scheduled.size == 0
