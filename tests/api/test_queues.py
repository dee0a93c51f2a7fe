"""Queue and JobRecord: size, latency, paged iteration, find, delete, clear, odd payloads."""

from __future__ import annotations

import pytest
import redis

from asynctask import Client, Settings, payload
from asynctask.api import JobRecord, Queue, Stats
from asynctask.brokers.sql.reads import SqlReader
from asynctask.keys import Keys
from asynctask.payload import compress_backtrace
from tests.api.conftest import sidekiq_job
from tests.api.stores import SqlStore, Store

#: A payload exactly as Sidekiq 6.4.1 pushed it (captured).
CAPTURED = (
    '{"retry":true,"queue":"default","args":[1,"ünï"],"class":"PlainJob","jid":"fa95523ef3171ce035e99268",'
    '"created_at":1795264797.8023384,"enqueued_at":1795264797.8024855}'
).encode()


def push_jobs(store: Store, count: int, queue: str = "default") -> list[str]:
    """``count`` jobs with args ``[0]``, ``[1]``..., pushed in that order; their jids."""
    jobs = [sidekiq_job(args=[n], queue=queue) for n in range(count)]
    for job in jobs:
        store.push(job, queue)
    return [str(job["jid"]) for job in jobs]


def test_size_latency_and_iteration_newest_first(store: Store) -> None:
    queue = Queue("default", settings=store.settings)
    assert (queue.size, queue.latency, list(queue)) == (0, 0.0, [])
    store.push(sidekiq_job(enqueued_at=payload.now() - 60))
    jids = push_jobs(store, 120)

    records = list(queue)

    assert queue.size == 121
    assert 59 < queue.latency < 70
    assert [r.jid for r in records[:120]] == list(reversed(jids))
    assert len({r.jid for r in records}) == 121
    assert all(r.queue == "default" and r.valid for r in records)


def test_record_fields(store: Store) -> None:
    queue = Queue("default", settings=store.settings)
    store.push(CAPTURED)
    (record,) = queue
    assert record.raw == CAPTURED
    assert record.item is not None and record.item["jid"] == "fa95523ef3171ce035e99268"
    assert record.jid == "fa95523ef3171ce035e99268"
    assert record.klass == record.display_class == "PlainJob"
    assert record.args == [1, "ünï"]
    assert record.created_at == 1795264797.8023384
    assert record.enqueued_at == 1795264797.8024855
    assert record.error is None and record.error_message is None and record.retry_count is None
    assert record.get("retry") is True and record.get("missing", 5) == 5


def test_error_fields_and_backtrace(store: Store) -> None:
    queue = Queue("default", settings=store.settings)
    packed = compress_backtrace(["app.py:1:in `run'", "app.py:9:in `main'"])
    job = sidekiq_job(
        error_message="boom ✓",
        error_class="ValueError",
        failed_at=1795264807.6441557,
        retry_count=2,
        retried_at=1795264844.6271803,
        error_backtrace=packed,
        tags=["a", 1],
        wrapped="MyActiveJob",
    )
    store.push(job)
    (record,) = queue
    assert (record.error_message, record.error_class, record.retry_count) == ("boom ✓", "ValueError", 2)
    assert (record.failed_at, record.retried_at) == (1795264807.6441557, 1795264844.6271803)
    assert record.error_backtrace == ["app.py:1:in `run'", "app.py:9:in `main'"]
    assert record.tags == ["a"]
    assert record.display_class == "MyActiveJob"


def test_sidekiq8_millisecond_timestamps_read_as_seconds(store: Store) -> None:
    queue = Queue("default", settings=store.settings)
    now_ms = int(payload.now() * 1000)
    raw = (
        '{"retry":true,"queue":"default","args":[],"class":"Sidekiq::ActiveJob::Wrapper",'
        f'"jid":"0123456789abcdef01234567","created_at":{now_ms - 20_000},"enqueued_at":{now_ms - 10_000},'
        f'"failed_at":1795264807644}}'
    )
    store.push(raw)
    (record,) = queue
    assert record.enqueued_at == (now_ms - 10_000) / 1000
    assert record.created_at == (now_ms - 20_000) / 1000
    assert record.failed_at == 1795264807.644
    assert 9 < queue.latency < 15
    assert 9 < record.latency < 15


def test_invalid_entries_are_listed(conn: redis.Redis, redis_settings: Settings) -> None:
    queue = Queue("default", conn, settings=redis_settings)
    good = payload.dumps(sidekiq_job())
    conn.lpush(queue.key, b"\xff\xfe not json", b"[1, 2]", b'{"args":[],"jid":"x1"}', good)

    records = list(queue)

    assert [r.valid for r in records] == [True, False, False, False]
    no_class, array, garbage = records[1:]
    assert no_class.item == {"args": [], "jid": "x1"} and no_class.jid == "x1" and no_class.klass is None
    assert "class" in (no_class.error or "")
    assert array.item is None and array.args == [] and array.jid is None
    assert garbage.item is None and "JSON" in (garbage.error or "") and garbage.raw == b"\xff\xfe not json"
    assert garbage.value.endswith("not json")
    assert queue.latency == 0.0
    assert garbage.delete() and array.delete() and no_class.delete()
    assert queue.size == 1


def test_find_job_and_delete(store: Store) -> None:
    jids = push_jobs(store, 70)
    queue = Queue("default", settings=store.settings)
    found = queue.find_job(jids[3])
    assert found is not None and found.args == [3]
    assert queue.find_job("0" * 24) is None
    assert found.delete() is True
    assert found.delete() is False
    assert queue.find_job(jids[3]) is None
    assert queue.size == 69


def test_deleting_while_iterating_visits_every_job(store: Store) -> None:
    push_jobs(store, 130)
    queue = Queue("default", settings=store.settings)
    seen = []
    for record in queue:
        if record.args[0] % 2 == 0:
            assert record.delete()
        seen.append(record.args[0])
    assert sorted(seen) == list(range(130))
    assert sorted(r.args[0] for r in queue) == list(range(1, 130, 2))


def test_jobs_fetched_while_iterating_are_not_yielded_twice(store: Store) -> None:
    push_jobs(store, 130)
    queue = Queue("default", settings=store.settings)
    seen = []
    for record in queue:
        if queue.size:
            store.take()  # a worker takes the next job
        seen.append(record.jid)
    assert len(seen) == len(set(seen))


def test_jobs_in_flight_are_not_in_the_queue(store: Store) -> None:
    jids = push_jobs(store, 3)
    store.take()
    queue = Queue("default", settings=store.settings)
    assert queue.size == 2
    assert [r.jid for r in queue] == [jids[2], jids[1]]
    assert queue.find_job(jids[0]) is None
    assert queue.clear() == 2
    assert store.queued() == [] and queue.size == 0


def test_a_sql_queue_runs_lower_priorities_first(sql_store: SqlStore) -> None:
    now = payload.now()
    low, first, second = (sidekiq_job(args=[n], enqueued_at=now - 30 + n) for n in range(3))
    sql_store.push(low, priority=5)
    sql_store.push(first)
    sql_store.push(second)
    queue = Queue("default", settings=sql_store.settings)

    assert [r.args for r in queue] == [[0], [2], [1]]  # the reverse of the order they run in
    assert 29 < queue.latency < 40  # the job waiting longest, whatever its priority
    sql_store.take()
    assert [r.args for r in queue] == [[0], [2]]


def test_readers_of_one_sql_url_share_one_engine(sql_store: SqlStore) -> None:
    first = Queue("a", settings=sql_store.settings).context.backend
    second = Stats(settings=sql_store.settings).backend
    assert isinstance(first, SqlReader) and isinstance(second, SqlReader)
    assert first.engine is second.engine
    with pytest.raises(ValueError, match="Redis keys"):
        Queue("a", keys=Keys("ns"), settings=sql_store.settings)


def test_clear_removes_the_jobs_and_the_name(store: Store) -> None:
    push_jobs(store, 2, "low")
    push_jobs(store, 1)
    queue = Queue("low", settings=store.settings)
    assert queue.clear() == 2
    assert queue.size == 0 and store.queued("low") == []
    assert [q.name for q in Queue.all(settings=store.settings)] == ["default"]
    assert queue.clear() == 0


def test_all_is_sorted_by_name(store: Store) -> None:
    for name in ("zeta", "alpha", "mid"):
        push_jobs(store, 1, name)
    queues = Queue.all(settings=store.settings)
    assert [q.name for q in queues] == ["alpha", "mid", "zeta"]
    assert queues[0] == Queue("alpha", settings=store.settings)
    assert queues[0] != Queue("mid", settings=store.settings)
    assert all(q.size == 1 for q in queues)


def test_a_redis_queue_is_its_list(conn: redis.Redis, redis_settings: Settings, redis_client: Client) -> None:
    redis_client.push({"class": "HardJob", "args": [], "queue": "alpha"})
    queue = Queue("alpha", conn, Keys(redis_settings.namespace))
    assert queue.key == f"{redis_settings.namespace}:queue:alpha"
    assert queue == Queue.all(conn, settings=redis_settings)[0]
    assert queue.clear() == 1
    assert not conn.exists(queue.key) and not conn.sismember(f"{redis_settings.namespace}:queues", "alpha")


def test_record_of_a_decode_responses_connection(redis_settings: Settings, redis_client: Client) -> None:
    text_conn = redis.Redis.from_url(redis_settings.redis_url, decode_responses=True)
    try:
        redis_client.push({"class": "HardJob", "args": ["ü"]})
        (record,) = Queue("default", text_conn, settings=redis_settings)
        assert isinstance(record, JobRecord) and record.args == ["ü"]
        assert record.delete()
    finally:
        text_conn.close()


def test_pause_and_resume_a_queue_which_all_lists_even_empty(store: Store) -> None:
    push_jobs(store, 2)
    held = Queue("held", settings=store.settings)
    default = Queue("default", settings=store.settings)
    assert not held.paused

    held.pause()
    held.pause()

    assert held.paused and not default.paused
    assert Queue("held", settings=store.settings).paused
    # Never pushed to: listed for being paused.
    assert [(q.name, q.size, q.paused) for q in Queue.all(settings=store.settings)] == [
        ("default", 2, False),
        ("held", 0, True),
    ]
    push_jobs(store, 3, "held")
    assert held.size == 3
    # Clearing deletes the jobs; the queue stays paused.
    assert held.clear() == 3
    assert held.paused and [q.name for q in Queue.all(settings=store.settings)] == ["default", "held"]

    held.resume()
    held.resume()

    assert not held.paused
    assert [q.name for q in Queue.all(settings=store.settings)] == ["default"]


@pytest.mark.parametrize("name", ["", "a\x00b", "line\nbreak", "q" * 256])
def test_a_name_no_job_can_carry_cannot_be_paused(store: Store, name: str) -> None:
    queue = Queue(name, settings=store.settings)
    with pytest.raises(ValueError, match="not a queue name"):
        queue.pause()
    with pytest.raises(ValueError, match="not a queue name"):
        queue.resume()
    assert [q.name for q in Queue.all(settings=store.settings)] == []
