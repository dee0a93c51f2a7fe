"""Enqueueing: payload bytes, queues, schedule, bulk round trips, validation, middleware."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import asynctask
from asynctask import Client, Registry, Settings
from asynctask.keys import Keys
from asynctask.middleware import Chain
from tests.conftest import REDIS_URL
from tests.redis_sockets import WatchedConnection

CAPTURED_PUSH = (
    '{"retry":true,"queue":"default","args":[1,"ünï"],"class":"PlainJob",'
    '"jid":"JID","created_at":CREATED,"enqueued_at":ENQUEUED}'
)
CAPTURED_SCHEDULE = (
    '{"retry":true,"queue":"default","class":"PlainJob","args":[3,{"k":"v"}],'
    '"jid":"JID","created_at":CREATED}'
)


def normalized(raw: bytes) -> str:
    text = raw.decode()
    text = re.sub(r'"jid":"[0-9a-f]{24}"', '"jid":"JID"', text)
    text = re.sub(r'"created_at":[0-9.]+', '"created_at":CREATED', text)
    return re.sub(r'"enqueued_at":[0-9.]+', '"enqueued_at":ENQUEUED', text)


@pytest.fixture
def plain_job(registry: Registry, redis_client: Client) -> Any:
    @asynctask.job(name="PlainJob", registry=registry)
    def plain(*args: Any) -> None: ...

    return plain


def test_perform_async_writes_the_bytes_sidekiq_writes(
    plain_job: Any, redis_client: Client, conn: redis.Redis
) -> None:
    jid = plain_job.set(client=redis_client).perform_async(1, "ünï")
    keys = redis_client.keys
    assert conn.smembers(keys.queues) == {b"default"}
    [raw] = conn.lrange(keys.queue("default"), 0, -1)
    assert normalized(raw) == CAPTURED_PUSH
    job = json.loads(raw)
    assert job["jid"] == jid
    assert isinstance(job["created_at"], float) and isinstance(job["enqueued_at"], float)
    assert abs(job["enqueued_at"] - time.time()) < 5


def test_perform_in_goes_to_the_schedule_without_enqueued_at(
    plain_job: Any, redis_client: Client, conn: redis.Redis
) -> None:
    before = time.time()
    plain_job.set(client=redis_client).perform_in(3600, 3, {"k": "v"})
    [(raw, score)] = conn.zrange(redis_client.keys.schedule, 0, -1, withscores=True)
    score = float(score)
    assert normalized(raw) == CAPTURED_SCHEDULE
    assert before + 3600 <= score <= time.time() + 3600
    assert conn.llen(redis_client.keys.queue("default")) == 0


def test_a_past_timestamp_is_pushed_at_once(plain_job: Any, redis_client: Client, conn: redis.Redis) -> None:
    plain_job.set(client=redis_client).perform_at(time.time() - 10, 1)
    assert conn.llen(redis_client.keys.queue("default")) == 1
    assert conn.zcard(redis_client.keys.schedule) == 0


def test_job_options_and_set_overrides_land_in_the_payload(
    registry: Registry, redis_client: Client, conn: redis.Redis
) -> None:
    @asynctask.job(
        name="Opts", queue="low", retry=5, backtrace=10, dead=False, tags=["a"], registry=registry, track=True
    )
    def opts(x: int) -> None: ...

    opts.set(client=redis_client, queue="critical", retry_queue="slow").perform_async(1)
    [raw] = conn.lrange(redis_client.keys.queue("critical"), 0, -1)
    job = json.loads(raw)
    # Sidekiq's order: the class's options, then the per-call ones, then args and class.
    assert list(job)[:8] == ["retry", "queue", "backtrace", "dead", "tags", "track", "retry_queue", "args"]
    assert (job["retry"], job["queue"], job["backtrace"], job["dead"]) == (5, "critical", 10, False)
    assert (job["retry_queue"], job["tags"], job["track"]) == ("slow", ["a"], True)


def test_client_push_of_an_unregistered_ruby_class_uses_sidekiq_defaults(
    redis_client: Client, conn: redis.Redis
) -> None:
    jid = redis_client.push({"class": "SleepWorker", "args": [3600]})
    [raw] = conn.lrange(redis_client.keys.queue("default"), 0, -1)
    job = json.loads(raw)
    assert list(job) == ["retry", "queue", "class", "args", "jid", "created_at", "enqueued_at"]
    assert job["jid"] == jid and job["class"] == "SleepWorker"


@pytest.mark.parametrize(
    ("item", "error"),
    [
        ({"class": "X", "args": [object()]}, "is a object"),
        ({"class": "X", "args": (1,)}, "must be a list"),
        ({"class": "", "args": []}, "non-empty job name"),
        ({"class": "X", "args": [], "queue": ""}, "'queue' must be"),
        ({"class": "X", "args": [], "retry": "yes"}, "'retry' must be"),
        ({"class": "X", "args": [], "at": "soon"}, "'at' must be"),
        ({"class": "X", "args": [], "extra": {1, 2}}, "is a set"),
        ({"class": "X", "args": [], "weight": float("nan")}, "is nan, which JSON cannot represent"),
        ({"class": "X", "args": [], 7: "seven"}, "has a int key 7"),
    ],
)
def test_bad_items_are_refused_before_anything_is_written(
    redis_client: Client, conn: redis.Redis, item: dict[str, Any], error: str
) -> None:
    with pytest.raises(TypeError, match=error):
        redis_client.push(item)
    assert conn.exists(redis_client.keys.queues) == 0


def test_perform_async_checks_the_arguments_against_the_function(
    registry: Registry, redis_client: Client
) -> None:
    @asynctask.job(registry=registry)
    def two(a: int, b: int) -> None: ...

    with pytest.raises(TypeError, match="cannot take 1 argument"):
        two.set(client=redis_client).perform_async(1)
    with pytest.raises(TypeError, match="is a tuple"):
        two.set(client=redis_client).perform_async(1, (2,))


def test_oversized_payload_is_refused_at_push(namespace: str, conn: redis.Redis) -> None:
    client = Client(
        Settings(namespace=namespace, max_payload_bytes=1000), connection=conn, middleware=Chain()
    )
    with pytest.raises(ValueError, match="over the 1000-byte limit"):
        client.push({"class": "X", "args": ["x" * 2000]})
    assert conn.exists(client.keys.queue("default")) == 0


def test_push_bulk_is_one_round_trip_per_thousand_jobs(redis_settings: Settings, registry: Registry) -> None:
    conn = redis.Redis.from_url(redis_settings.redis_url, connection_class=WatchedConnection)
    client = Client(redis_settings, connection=conn, registry=registry, middleware=Chain())
    # A first push opens the connection pushes use: its handshake is not the pushes'.
    client.push_bulk({"class": "Bulk", "args": [[-1]], "queue": "warm-up"})
    WatchedConnection.reset()
    jids = client.push_bulk({"class": "Bulk", "args": [[i] for i in range(2500)], "queue": "bulk"})
    assert WatchedConnection.writes == 3
    assert len(set(jids)) == 2500
    assert conn.llen(client.keys.queue("bulk")) == 2500
    # FIFO: the first job pushed is the first a worker (RPOP side) takes.
    assert json.loads(conn.rpop(client.keys.queue("bulk")) or b"")["args"] == [0]
    conn.close()


def test_push_bulk_with_timestamps_schedules_each_job(redis_client: Client, conn: redis.Redis) -> None:
    soon = time.time() + 100
    redis_client.push_bulk({"class": "Bulk", "args": [[1], [2]], "at": [soon, soon + 1]})
    scores = [score for _, score in conn.zrange(redis_client.keys.schedule, 0, -1, withscores=True)]
    assert scores == pytest.approx([soon, soon + 1])
    with pytest.raises(ValueError, match="one timestamp per job"):
        redis_client.push_bulk({"class": "Bulk", "args": [[1], [2]], "at": [soon]})


def test_client_middleware_can_change_or_drop_a_job(redis_settings: Settings, conn: redis.Redis) -> None:
    def stamp(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        job["stamped"] = queue
        return call_next()

    def drop_odd(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        return None if job["args"][0] % 2 else call_next()

    client = Client(redis_settings, connection=conn, middleware=Chain([stamp, drop_odd]))
    assert client.push({"class": "X", "args": [1]}) is None
    jids = client.push_bulk({"class": "X", "args": [[1], [2], [3], [4]]})
    assert [j is None for j in jids] == [True, False, True, False]
    jobs = [json.loads(raw) for raw in conn.lrange(client.keys.queue("default"), 0, -1)]
    assert sorted(j["args"][0] for j in jobs) == [2, 4]
    assert all(j["stamped"] == "default" for j in jobs)


def test_namespace_prefixes_keys_but_not_values(namespace: str, conn: redis.Redis) -> None:
    client = Client(Settings(namespace=namespace), connection=conn, middleware=Chain())
    client.push({"class": "X", "args": [], "queue": "q1"})
    assert conn.smembers(f"{namespace}:queues") == {b"q1"}
    assert conn.llen(f"{namespace}:queue:q1") == 1
    assert Keys(namespace).queue("q1") == f"{namespace}:queue:q1"


def test_default_client_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, namespace: str) -> None:
    monkeypatch.setenv("ASYNCTASK_NAMESPACE", namespace)
    monkeypatch.setenv("ASYNCTASK_REDIS_URL", REDIS_URL)
    monkeypatch.setattr(asynctask.client, "_default", None)
    assert asynctask.default_client().keys.prefix == f"{namespace}:"


def _pushed(conn: redis.Redis, client: Client, queue: str = "default") -> list[bytes]:
    """The queue's payloads, the first pushed first."""
    return list(reversed(conn.lrange(client.keys.queue(queue), 0, -1)))


def test_perform_async_writes_what_a_push_of_its_item_writes(
    registry: Registry, redis_client: Client, conn: redis.Redis
) -> None:
    @asynctask.job(name="Full", queue="low", retry=5, backtrace=10, dead=False, tags=["a"], registry=registry)
    def full(x: int, y: Any = None) -> None: ...

    full.set(client=redis_client).perform_async(1, {"k": [2.5]})
    full.set(client=redis_client).perform_async(2)
    redis_client.push({**full.options.payload_head(), "args": [1, {"k": [2.5]}], "class": "Full"})
    first, second, pushed = map(normalized, _pushed(conn, redis_client, "low"))
    assert first == pushed
    assert second == pushed.replace('[1,{"k":[2.5]}]', "[2]")


def test_what_a_middleware_changes_in_one_perform_async_stays_out_of_the_next(
    registry: Registry, redis_settings: Settings, conn: redis.Redis
) -> None:
    def tag(job: dict[str, Any], queue: str, call_next: Callable[[], Any]) -> Any:
        job["tags"].append("seen")
        job["custom"]["count"] += 1
        return call_next()

    @asynctask.job(name="Tagged", tags=["a"], custom={"count": 0}, registry=registry)
    def tagged() -> None: ...

    client = Client(redis_settings, connection=conn, registry=registry, middleware=Chain([tag]))
    for _ in range(3):
        tagged.set(client=client).perform_async()
    jobs = [json.loads(raw) for raw in conn.lrange(client.keys.queue("default"), 0, -1)]
    assert [(job["tags"], job["custom"]) for job in jobs] == [(["a", "seen"], {"count": 1})] * 3


def test_perform_async_follows_new_options_and_a_new_registration_of_its_name(
    registry: Registry, redis_client: Client, conn: redis.Redis
) -> None:
    @asynctask.job(name="Moving", registry=registry)
    def moving() -> None: ...

    moving.set(client=redis_client).perform_async()
    moving.options = moving.options.merged({"queue": "other"})
    moving.set(client=redis_client).perform_async()
    # Another definition of the name in the client's registry lends its options as defaults.
    registry.remove("Moving")

    @asynctask.job(name="Moving", queue="third", retry_queue="slow", registry=registry)
    def replacement() -> None: ...

    moving.set(client=redis_client).perform_async()
    default, other = _pushed(conn, redis_client), _pushed(conn, redis_client, "other")
    assert [json.loads(raw)["queue"] for raw in default] == ["default"]
    first, second = map(json.loads, other)
    assert "retry_queue" not in first and second["retry_queue"] == "slow"
    assert list(second)[:3] == ["retry", "queue", "retry_queue"]
