"""ScheduledSet, RetrySet, DeadSet: listing, lookup, and the atomic moves between sets and queues."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest
import redis

from asynctask import PayloadError, payload
from asynctask.api import DeadSet, Queue, RetrySet, ScheduledSet
from asynctask.brokers import open_broker
from asynctask.middleware import Chain
from asynctask.worker.poller import Poller
from tests.api.conftest import sidekiq_job
from tests.api.stores import Store


def failed_job(**fields: object) -> payload.JobDict:
    return sidekiq_job(
        error_message="boom",
        error_class="RuntimeError",
        failed_at=payload.now() - 100,
        retry_count=2,
        **fields,
    )


def schedule(store: Store, at: float, *args: object, queue: str = "default") -> str:
    """A job scheduled for ``at``, as a client pushes it (Sidekiq >= 7.1.2: no enqueued_at)."""
    job = sidekiq_job(args=list(args), queue=queue)
    del job["enqueued_at"]
    store.add("schedule", job, at)
    return str(job["jid"])


def test_scheduled_jobs_are_listed_latest_first(store: Store) -> None:
    now = payload.now()
    jids = [schedule(store, now + 60 * (n + 1), n) for n in range(3)]
    scheduled = ScheduledSet(settings=store.settings)

    entries = list(scheduled)

    assert scheduled.size == 3
    assert [e.jid for e in entries] == list(reversed(jids))
    assert entries[0].score == pytest.approx(now + 180)
    assert entries[0].at == datetime.fromtimestamp(entries[0].score, UTC)
    assert entries[0].enqueued_at is None  # Sidekiq >= 7.1.2 leaves it out of scheduled jobs


def test_find_fetch_and_scan(store: Store) -> None:
    at = payload.now() + 3600
    jids = [schedule(store, at, "needle*[x]"), schedule(store, at, "hay")]
    schedule(store, at + 10, "later")
    scheduled = ScheduledSet(settings=store.settings)

    found = scheduled.find_job(str(jids[1]))
    assert found is not None and found.args == ["hay"] and found.score == pytest.approx(at)
    assert scheduled.find_job("f" * 24) is None
    assert {e.jid for e in scheduled.fetch(found.score)} == set(jids)
    assert [e.jid for e in scheduled.fetch(found.score, jid=jids[0])] == [jids[0]]
    assert len(scheduled.fetch((at - 1, at + 11))) == 3
    assert [e.args for e in scheduled.scan("needle*[x]")] == [["needle*[x]"]]
    assert list(scheduled.scan("needle*[y]")) == []
    assert list(scheduled.scan("NEEDLE")) == []  # case counts, as in Redis's MATCH


def test_iteration_pages_through_equal_scores_and_deletions(store: Store) -> None:
    same = payload.now() + 100
    for n in range(180):
        store.add("schedule", sidekiq_job(args=[n]), same if n < 120 else same + n)
    scheduled = ScheduledSet(settings=store.settings)
    scheduled.page_size = 25

    seen = []
    for entry in scheduled:
        seen.append(entry.args[0])
        if entry.args[0] % 3 == 0:
            assert entry.delete()

    assert sorted(seen) == list(range(180))
    assert seen[:60] == list(range(179, 119, -1))
    assert scheduled.size == 120


def test_iteration_survives_entries_added_and_removed_elsewhere(store: Store) -> None:
    now = payload.now()
    for n in range(200):
        store.add("retry", sidekiq_job(args=[n]), now + n)
    retries = RetrySet(settings=store.settings)
    retries.page_size = 30

    seen = []
    for entry in retries:
        seen.append(entry.args[0])
        # Meanwhile new failures land on top and the poller takes the due end.
        store.add("retry", sidekiq_job(args=["new"]), now + 1000 + len(seen))
        if entry.args[0] < 150:
            store.pop_lowest("retry")

    assert "new" not in seen
    assert len(seen) == len(set(seen))
    assert seen == list(range(199, 199 - len(seen), -1))
    assert len(seen) >= 100


def test_add_to_queue_moves_once_with_a_fresh_enqueued_at(store: Store) -> None:
    jid = schedule(store, payload.now() + 3600, 1, queue="low")
    (entry,) = ScheduledSet(settings=store.settings)
    before = payload.now()

    assert entry.add_to_queue() is True
    assert entry.add_to_queue() is False  # stale: already moved

    (job,) = store.queued("low")
    assert job["jid"] == jid and job["enqueued_at"] >= before
    assert [q.name for q in Queue.all(settings=store.settings)] == ["low"]
    assert 0 <= Queue("low", settings=store.settings).latency < 5
    assert ScheduledSet(settings=store.settings).size == 0


def test_retry_decrements_retry_count_and_keeps_the_payload(store: Store) -> None:
    job = failed_job(enqueued_at=1795264797.8024855)
    store.add("retry", job, payload.now() + 60)
    (entry,) = RetrySet(settings=store.settings)
    assert entry.retry_count == 2 and entry.error_message == "boom"

    assert entry.retry() is True

    (pushed,) = store.queued()
    assert list(pushed) == list(job)  # keys keep Sidekiq's order; enqueued_at keeps its place
    assert pushed["retry_count"] == 1
    assert pushed["enqueued_at"] > 1795264797.8024855
    assert {k: v for k, v in pushed.items() if k not in ("retry_count", "enqueued_at")} == {
        k: v for k, v in job.items() if k not in ("retry_count", "enqueued_at")
    }
    assert RetrySet(settings=store.settings).size == 0
    assert entry.retry() is False
    assert len(store.queued()) == 1


def test_actions_refuse_or_handle_invalid_entries(store: Store) -> None:
    store.add("retry", b"{oops", payload.now())
    store.add("retry", b'{"class":"X","args":"no list"}', payload.now() + 1)
    retries = RetrySet(settings=store.settings)
    entries = list(retries)
    assert [e.valid for e in entries] == [False, False]
    assert entries[0].item == {"class": "X", "args": "no list"} and entries[1].item is None
    with pytest.raises(PayloadError):
        entries[1].retry()
    with pytest.raises(PayloadError):
        entries[0].add_to_queue()
    assert retries.retry_all() == 0
    assert retries.size == 2
    assert entries[1].kill() is True
    assert [e.raw for e in DeadSet(settings=store.settings)] == [b"{oops"]


def test_retry_all_moves_every_valid_entry(store: Store) -> None:
    jobs = [failed_job(queue="default" if n % 2 else "critical") for n in range(250)]
    for n, job in enumerate(jobs):
        store.add("retry", job, payload.now() + n)
    store.add("retry", b"not json", 0)  # lowest score: stays at rank 0

    assert RetrySet(settings=store.settings).retry_all() == 250

    assert [e.raw for e in RetrySet(settings=store.settings)] == [b"not json"]
    pushed = store.queued() + store.queued("critical")
    assert sorted(j["jid"] for j in pushed) == sorted(j["jid"] for j in jobs)
    assert {j["retry_count"] for j in pushed} == {1}


def test_kill_and_kill_all_move_to_dead(store: Store) -> None:
    for n in range(130):
        store.add("retry", failed_job(), payload.now() + n)
    retries = RetrySet(settings=store.settings)
    first = next(iter(retries))
    before = payload.now()

    assert first.kill() is True
    assert first.kill() is False
    assert retries.kill_all() == 129

    dead = DeadSet(settings=store.settings)
    assert (retries.size, dead.size) == (0, 130)
    found = dead.find_job(str(first.jid))
    assert found is not None and found.raw == first.raw and found.score >= before


def test_kill_trims_the_dead_set_by_count_and_age(store: Store) -> None:
    small = replace(store.settings, dead_max_jobs=3, dead_timeout=3600)
    now = payload.now()
    store.add("dead", sidekiq_job(args=["ancient"]), now - 7200)
    for n in range(3):
        store.add("dead", sidekiq_job(args=[n]), now - 100 + n)
    store.add("retry", failed_job(args=["victim"]), now)

    (victim,) = RetrySet(settings=small)
    assert victim.kill()

    dead = DeadSet(settings=small)
    assert [e.args for e in dead] == [["victim"], [2], [1]]
    dead.kill(sidekiq_job(args=["direct"]))
    assert [e.args for e in dead] == [["direct"], ["victim"], [2]]


def test_a_bare_connection_has_the_default_dead_limits(conn: redis.Redis) -> None:
    defaults = DeadSet(conn).context.settings
    assert (defaults.dead_max_jobs, defaults.dead_timeout) == (10_000, 180 * 24 * 3600)


def test_dead_retry_all_and_clear(store: Store) -> None:
    dead = DeadSet(settings=store.settings)
    for n in range(3):
        dead.kill(failed_job(args=[n], queue="critical"))
    (entry, *_) = dead
    assert entry.delete() is True and entry.delete() is False
    assert dead.retry_all() == 2
    assert sorted(j["args"][0] for j in store.queued("critical")) == [0, 1]
    dead.kill(payload.dumps(failed_job()))
    assert dead.clear() == 1 and dead.size == 0
    assert list(dead) == []


def test_sidekiq8_millisecond_fields_in_a_set(store: Store) -> None:
    raw = (
        '{"retry":true,"queue":"default","args":[],"class":"HardJob","jid":"0123456789abcdef01234567",'
        '"created_at":1795264797802,"enqueued_at":1795264797802,"error_message":"x","error_class":"E",'
        '"failed_at":1795264807644,"retry_count":0}'
    )
    store.add("retry", raw, 1795264826.6443377)
    (entry,) = RetrySet(settings=store.settings)
    assert (entry.created_at, entry.failed_at) == (1795264797.802, 1795264807.644)
    assert entry.at.timestamp() == pytest.approx(1795264826.6443377)


def test_retry_now_racing_the_poller_enqueues_each_job_once(store: Store) -> None:
    jobs = [failed_job() for _ in range(300)]
    for job in jobs:
        store.add("retry", job, payload.now() - 1)  # all due
    entries = list(RetrySet(settings=store.settings))
    broker = open_broker(store.settings)
    poller = Poller(broker, Chain(), store.settings.scheduled_poll_interval)
    start = threading.Barrier(3)
    outcomes: list[bool] = []
    polled: list[int] = []

    def click(half: list[object]) -> None:
        start.wait()
        outcomes.extend(e.retry() for e in half)  # type: ignore[attr-defined]

    def poll() -> None:
        start.wait()
        while RetrySet(settings=store.settings).size:
            polled.append(poller.enqueue())

    threads = [
        threading.Thread(target=click, args=(entries[::2],)),
        threading.Thread(target=click, args=(entries[1::2],)),
        threading.Thread(target=poll),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    broker.close()

    pushed = store.queued()
    assert sorted(j["jid"] for j in pushed) == sorted(j["jid"] for j in jobs)
    assert sum(outcomes) + sum(polled) == 300
    assert RetrySet(settings=store.settings).size == 0


def test_a_stale_entry_is_not_enqueued_again(store: Store) -> None:
    store.add("schedule", sidekiq_job(), payload.now() - 1)
    (entry,) = ScheduledSet(settings=store.settings)
    broker = open_broker(store.settings)
    try:
        assert Poller(broker, Chain(), 1).enqueue() == 1
    finally:
        broker.close()
    assert (entry.add_to_queue(), entry.retry(), entry.kill(), entry.delete()) == (False, False, False, False)
    assert Queue("default", settings=store.settings).size == 1
    assert DeadSet(settings=store.settings).size == 0
