"""ScheduledSet, RetrySet, DeadSet: listing, lookup, and the atomic moves between sets and queues."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest
import redis

from asynctask import Client, PayloadError, Settings, payload
from asynctask.api import DeadSet, Queue, RetrySet, ScheduledSet
from asynctask.brokers.redis import RedisBroker
from asynctask.keys import Keys
from asynctask.middleware import Chain
from asynctask.worker.scheduled import Poller
from tests.api.conftest import sidekiq_job


def failed_job(**fields: object) -> payload.JobDict:
    return sidekiq_job(
        error_message="boom",
        error_class="RuntimeError",
        failed_at=payload.now() - 100,
        retry_count=2,
        **fields,
    )


def queued(conn: redis.Redis, keys: Keys, queue: str = "default") -> list[payload.JobDict]:
    return [payload.loads(raw) for raw in conn.lrange(keys.queue(queue), 0, -1)]


def test_scheduled_jobs_are_listed_latest_first(
    conn: redis.Redis, settings: Settings, client: Client
) -> None:
    now = payload.now()
    jids = [client.push({"class": "HardJob", "args": [n], "at": now + 60 * (n + 1)}) for n in range(3)]
    scheduled = ScheduledSet(conn, settings=settings)

    entries = list(scheduled)

    assert scheduled.size == 3
    assert [e.jid for e in entries] == list(reversed(jids))
    assert entries[0].score == pytest.approx(now + 180)
    assert entries[0].at == datetime.fromtimestamp(entries[0].score, UTC)
    assert entries[0].enqueued_at is None  # Sidekiq >= 7.1.2 leaves it out of scheduled jobs


def test_find_fetch_and_scan(conn: redis.Redis, settings: Settings, client: Client) -> None:
    at = payload.now() + 3600
    jids = client.push_bulk({"class": "HardJob", "args": [["needle*[x]"], ["hay"]], "at": at})
    client.push({"class": "HardJob", "args": ["later"], "at": at + 10})
    scheduled = ScheduledSet(conn, settings=settings)

    found = scheduled.find_job(str(jids[1]))
    assert found is not None and found.args == ["hay"] and found.score == pytest.approx(at)
    assert scheduled.find_job("f" * 24) is None
    assert {e.jid for e in scheduled.fetch(found.score)} == set(jids)
    assert [e.jid for e in scheduled.fetch(found.score, jid=jids[0])] == [jids[0]]
    assert len(scheduled.fetch((at - 1, at + 11))) == 3
    assert [e.args for e in scheduled.scan("needle*[x]")] == [["needle*[x]"]]
    assert list(scheduled.scan("needle*[y]")) == []


def test_iteration_pages_through_equal_scores_and_deletions(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    same = payload.now() + 100
    members = {payload.dumps(sidekiq_job(args=[n])): same for n in range(120)}
    members.update({payload.dumps(sidekiq_job(args=[n])): same + n for n in range(120, 180)})
    conn.zadd(keys.schedule, members)
    scheduled = ScheduledSet(conn, settings=settings)
    scheduled.page_size = 25

    seen = []
    for entry in scheduled:
        seen.append(entry.args[0])
        if entry.args[0] % 3 == 0:
            assert entry.delete()

    assert sorted(seen) == list(range(180))
    assert seen[:60] == list(range(179, 119, -1))
    assert scheduled.size == 120


def test_iteration_survives_entries_added_and_removed_elsewhere(
    conn: redis.Redis, settings: Settings
) -> None:
    keys = Keys(settings.namespace)
    now = payload.now()
    conn.zadd(keys.retry, {payload.dumps(sidekiq_job(args=[n])): now + n for n in range(200)})
    retries = RetrySet(conn, settings=settings)
    retries.page_size = 30

    seen = []
    for entry in retries:
        seen.append(entry.args[0])
        # Meanwhile new failures land on top and the poller takes the due end.
        conn.zadd(keys.retry, {payload.dumps(sidekiq_job(args=["new"])): now + 1000 + len(seen)})
        if entry.args[0] < 150:
            conn.zpopmin(keys.retry)

    assert "new" not in seen
    assert len(seen) == len(set(seen))
    assert seen == list(range(199, 199 - len(seen), -1))
    assert len(seen) >= 100


def test_add_to_queue_moves_once_with_a_fresh_enqueued_at(
    conn: redis.Redis, settings: Settings, client: Client
) -> None:
    keys = Keys(settings.namespace)
    jid = client.push({"class": "HardJob", "args": [1], "queue": "low", "at": payload.now() + 3600})
    (entry,) = ScheduledSet(conn, settings=settings)
    before = payload.now()

    assert entry.add_to_queue() is True
    assert entry.add_to_queue() is False  # stale: already moved

    (job,) = queued(conn, keys, "low")
    assert job["jid"] == jid and job["enqueued_at"] >= before
    assert conn.sismember(keys.queues, "low")
    assert ScheduledSet(conn, settings=settings).size == 0


def test_retry_decrements_retry_count_and_keeps_the_payload(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    job = failed_job(enqueued_at=1795264797.8024855)
    conn.zadd(keys.retry, {payload.dumps(job): payload.now() + 60})
    (entry,) = RetrySet(conn, settings=settings)
    assert entry.retry_count == 2 and entry.error_message == "boom"

    assert entry.retry() is True

    (pushed,) = queued(conn, keys)
    assert list(pushed) == list(job)  # keys keep Sidekiq's order; enqueued_at keeps its place
    assert pushed["retry_count"] == 1
    assert pushed["enqueued_at"] > 1795264797.8024855
    assert {k: v for k, v in pushed.items() if k not in ("retry_count", "enqueued_at")} == {
        k: v for k, v in job.items() if k not in ("retry_count", "enqueued_at")
    }
    assert RetrySet(conn, settings=settings).size == 0
    assert entry.retry() is False
    assert len(queued(conn, keys)) == 1


def test_actions_refuse_or_handle_invalid_entries(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    conn.zadd(keys.retry, {b"{oops": payload.now(), b'{"class":"X","args":"no list"}': payload.now() + 1})
    retries = RetrySet(conn, settings=settings)
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
    assert [e.raw for e in DeadSet(conn, settings=settings)] == [b"{oops"]


def test_retry_all_moves_every_valid_entry(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    jobs = [failed_job(queue="default" if n % 2 else "critical") for n in range(250)]
    conn.zadd(keys.retry, {payload.dumps(j): payload.now() + n for n, j in enumerate(jobs)})
    conn.zadd(keys.retry, {b"not json": 0})  # lowest score: stays at rank 0

    assert RetrySet(conn, settings=settings).retry_all() == 250

    assert [e.raw for e in RetrySet(conn, settings=settings)] == [b"not json"]
    pushed = queued(conn, keys) + queued(conn, keys, "critical")
    assert sorted(j["jid"] for j in pushed) == sorted(j["jid"] for j in jobs)
    assert {j["retry_count"] for j in pushed} == {1}


def test_kill_and_kill_all_move_to_dead(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    jobs = [failed_job() for _ in range(130)]
    conn.zadd(keys.retry, {payload.dumps(j): payload.now() + n for n, j in enumerate(jobs)})
    retries = RetrySet(conn, settings=settings)
    first = next(iter(retries))
    before = payload.now()

    assert first.kill() is True
    assert first.kill() is False
    assert retries.kill_all() == 129

    dead = DeadSet(conn, settings=settings)
    assert (retries.size, dead.size) == (0, 130)
    found = dead.find_job(str(first.jid))
    assert found is not None and found.raw == first.raw and found.score >= before


def test_kill_trims_the_dead_set_by_count_and_age(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    small = replace(settings, dead_max_jobs=3, dead_timeout=3600)
    now = payload.now()
    ancient = payload.dumps(sidekiq_job(args=["ancient"]))
    conn.zadd(keys.dead, {ancient: now - 7200})
    conn.zadd(keys.dead, {payload.dumps(sidekiq_job(args=[n])): now - 100 + n for n in range(3)})
    conn.zadd(keys.retry, {payload.dumps(failed_job(args=["victim"])): now})

    (victim,) = RetrySet(conn, settings=small)
    assert victim.kill()

    dead = DeadSet(conn, settings=small)
    assert [e.args for e in dead] == [["victim"], [2], [1]]
    dead.kill(sidekiq_job(args=["direct"]))
    assert [e.args for e in dead] == [["direct"], ["victim"], [2]]
    defaults = DeadSet(conn).context.settings
    assert (defaults.dead_max_jobs, defaults.dead_timeout) == (10_000, 180 * 24 * 3600)


def test_dead_retry_all_and_clear(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    dead = DeadSet(conn, settings=settings)
    for n in range(3):
        dead.kill(failed_job(args=[n], queue="critical"))
    (entry, *_) = dead
    assert entry.delete() is True and entry.delete() is False
    assert dead.retry_all() == 2
    assert sorted(j["args"][0] for j in queued(conn, keys, "critical")) == [0, 1]
    dead.kill(payload.dumps(failed_job()))
    assert dead.clear() == 1 and dead.size == 0
    assert not conn.exists(keys.dead)


def test_sidekiq8_millisecond_fields_in_a_set(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    raw = (
        '{"retry":true,"queue":"default","args":[],"class":"HardJob","jid":"0123456789abcdef01234567",'
        '"created_at":1795264797802,"enqueued_at":1795264797802,"error_message":"x","error_class":"E",'
        '"failed_at":1795264807644,"retry_count":0}'
    )
    conn.zadd(keys.retry, {raw: 1795264826.6443377})
    (entry,) = RetrySet(conn, settings=settings)
    assert (entry.created_at, entry.failed_at) == (1795264797.802, 1795264807.644)
    assert entry.at.timestamp() == pytest.approx(1795264826.6443377)


def test_retry_now_racing_the_poller_enqueues_each_job_once(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    jobs = [failed_job() for _ in range(300)]
    conn.zadd(keys.retry, {payload.dumps(j): payload.now() - 1 for j in jobs})  # all due
    entries = list(RetrySet(conn, settings=settings))
    poller = Poller(RedisBroker(settings, conn), Chain(), settings.scheduled_poll_interval)
    start = threading.Barrier(3)
    outcomes: list[bool] = []
    polled: list[int] = []

    def click(half: list[object]) -> None:
        start.wait()
        outcomes.extend(e.retry() for e in half)  # type: ignore[attr-defined]

    def poll() -> None:
        start.wait()
        while RetrySet(conn, settings=settings).size:
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

    pushed = queued(conn, keys)
    assert sorted(j["jid"] for j in pushed) == sorted(j["jid"] for j in jobs)
    assert sum(outcomes) + sum(polled) == 300
    assert RetrySet(conn, settings=settings).size == 0


def test_a_stale_entry_is_not_enqueued_again(conn: redis.Redis, settings: Settings) -> None:
    keys = Keys(settings.namespace)
    conn.zadd(keys.schedule, {payload.dumps(sidekiq_job()): payload.now() - 1})
    (entry,) = ScheduledSet(conn, settings=settings)
    assert Poller(RedisBroker(settings, conn), Chain(), 1).enqueue() == 1
    assert (entry.add_to_queue(), entry.retry(), entry.kill(), entry.delete()) == (False, False, False, False)
    assert Queue("default", conn, settings=settings).size == 1
    assert DeadSet(conn, settings=settings).size == 0
