"""Redis flow control mechanics: slot accounting on every end path, lines, the due poller's
routing, rate-limit postponing, unique keys, and scripts that never fail on a bad payload.

The shared suites beside this module (test_concurrency.py, test_rate.py, test_unique.py,
test_tasks.py) prove the behaviour through workers; these
look at the keys, where a leaked slot or a script error shows at once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from asynctask import Settings, payload
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.reads import Move, Scored, Stored
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.redis.fetch import ReliableFetch
from asynctask.brokers.redis.reads import RedisReader
from tests.brokers.redis_keys import entry_jids, jids, queued


def job(jid: str, **flow: Any) -> payload.JobDict:
    return {"class": "X", "args": [], "jid": jid, "queue": "default", "retry": True, **flow}


def keyed(jid: str, key: str = "k", limit: int = 1, **more: Any) -> payload.JobDict:
    return job(jid, concurrency_key=key, concurrency_limit=limit, **more)


def line(broker: RedisBroker, key: str = "k") -> list[str]:
    """Jids waiting in a key's line, next first."""
    return entry_jids(broker, broker.keys.lane(key))


def holders(broker: RedisBroker, key: str = "k") -> set[str]:
    return {m.decode() for m in broker.redis.smembers(broker.keys.lane_holders(key))}


def claim(fetch: ReliableFetch, wanted: int = 1, acks: list[UnitOfWork] | None = None) -> list[UnitOfWork]:
    return fetch.claim(wanted, acks or [], [])


def due_now(broker: RedisBroker, set_name: str) -> None:
    """Make every member of the retry or schedule set due, then run the poller's step."""
    key = broker.keys.retry if set_name == "retry" else broker.keys.schedule
    for member in broker.redis.zrange(key, 0, -1):
        broker.redis.zadd(key, {member: 1})
    broker.enqueue_due("retry" if set_name == "retry" else "schedule", payload.loads)


def test_extra_jobs_of_a_key_wait_in_its_line_not_in_the_queue(redis_broker: RedisBroker) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("b"), None), (job("free"), None), (keyed("c"), None)])
    assert queued(redis_broker) == ["a", "free"]
    assert line(redis_broker) == ["b", "c"]
    assert holders(redis_broker) == {"a"}
    assert redis_broker.redis.hget(redis_broker.keys.lanes, "k") == b"1"


def test_the_claim_that_acknowledges_a_job_promotes_and_claims_the_next(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("b"), None), (keyed("c"), None)])
    [a] = claim(fetch)
    # One round trip: the ack frees a's slot, b is promoted to the queue and claimed.
    [b] = claim(fetch, acks=[a])
    assert json.loads(b.payload)["jid"] == "b"
    assert holders(redis_broker) == {"b"}
    assert line(redis_broker) == ["c"]
    [c] = claim(fetch, acks=[b])
    claim(fetch, acks=[c])
    assert holders(redis_broker) == set()
    # A key with nothing holding or waiting leaves the registry.
    assert not redis_broker.redis.exists(redis_broker.keys.lanes, redis_broker.keys.lane("k"))


def test_a_higher_limit_pushed_later_promotes_waiting_jobs_in_order(redis_broker: RedisBroker) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("b"), None), (keyed("c"), None)])
    redis_broker.push([(keyed("d", limit=3), None)])
    assert queued(redis_broker) == ["a", "b", "c"]
    assert line(redis_broker) == ["d"]


@pytest.mark.parametrize("end", ["release", "kill", "settle"])
def test_every_end_path_frees_the_slot(redis_broker: RedisBroker, fetch: ReliableFetch, end: str) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("b"), None)])
    [a] = claim(fetch)
    if end == "release":
        redis_broker.release(a)
    elif end == "kill":
        redis_broker.kill(a, payload.dumps_storable(payload.loads(a.payload)))
    else:
        fetch.settle([a], [])
    assert holders(redis_broker) == {"b"}
    assert queued(redis_broker) == ["b"]
    assert redis_broker.redis.llen(str(a.ref)) == 0


def test_an_end_for_a_job_no_longer_held_frees_nothing(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("b"), None)])
    [a] = claim(fetch)
    # Recovered by another process meanwhile: back in the queue, still holding its slot.
    fetch.requeue_all(forget=False)
    redis_broker.release(a)
    assert holders(redis_broker) == {"a"}
    assert queued(redis_broker) == ["a"]
    assert line(redis_broker) == ["b"]


@pytest.mark.parametrize(
    ("on_failure", "retrying", "due"),
    [
        pytest.param(
            {},
            ({"a"}, [], ["b"]),
            ({"a"}, ["a"], ["b"]),
            id="under_hold_keeps_the_slot_and_returns_straight_to_the_queue",
        ),
        pytest.param(
            {"concurrency_on_failure": "continue"},
            ({"b"}, ["b"], []),
            ({"b"}, ["b"], ["a"]),
            id="under_continue_frees_the_slot_and_rejoins_the_line",
        ),
    ],
)
def test_retry(
    redis_broker: RedisBroker,
    fetch: ReliableFetch,
    on_failure: dict[str, str],
    retrying: tuple[set[str], list[str], list[str]],
    due: tuple[set[str], list[str], list[str]],
) -> None:
    """(holders, queued, line) while the first of two keyed jobs waits for its retry, and once it is due."""

    def places() -> tuple[set[str], list[str], list[str]]:
        return holders(redis_broker), queued(redis_broker), line(redis_broker)

    redis_broker.push([(keyed("a", **on_failure), None), (keyed("b", **on_failure), None)])
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload) | {"retry_count": 0}, payload.now() + 60)
    assert places() == retrying
    due_now(redis_broker, "retry")
    assert places() == due


def test_a_due_scheduled_keyed_job_enters_its_line(redis_broker: RedisBroker) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("later"), payload.now() + 60)])
    assert holders(redis_broker) == {"a"}
    due_now(redis_broker, "schedule")
    assert line(redis_broker) == ["later"]
    assert queued(redis_broker) == ["a"]


def test_give_back_and_recovery_keep_the_slot(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("b"), None)])
    [a] = claim(fetch)
    assert fetch.requeue([a]) == 1
    assert holders(redis_broker) == {"a"}
    [a] = claim(fetch)
    redis_broker.redis.delete(redis_broker.keys.process("proc-1"))
    assert redis_broker.recover_orphans("proc-2") == 1
    assert holders(redis_broker) == {"a"}
    assert queued(redis_broker) == ["a"]
    assert line(redis_broker) == ["b"]


MALFORMED = [
    b'not json "concurrency_key" "rate_limit" "unique_key" "unique_until"',
    b'["concurrency_key", "rate_limit", "unique_key"]',
    b'{"jid":"m1","concurrency_key":5,"concurrency_limit":1,"rate_limit":7,"rate_key":"r"}',
    b'{"jid":"m2","concurrency_key":"k","concurrency_limit":"1","rate_limit":"x/s","rate_key":"r"}',
    b'{"jid":"m3","concurrency_key":"k","concurrency_limit":-2,"rate_limit":"0/s","rate_key":"r"}',
    b'{"jid":["x"],"concurrency_key":"k","concurrency_limit":1,"unique_key":{},"unique_until":"start"}',
    b'{"jid":"m4","concurrency_key":"k","concurrency_limit":1,"rate_limit":"2/d","rate_key":[]}',
    b'{"jid":"m5","concurrency_key":null,"unique_key":null,"unique_until":null,"rate_limit":null}',
    b'{"jid":"m6","concurrency_key":"k","concurrency_limit":1e999,"unique_key":"u","unique_for":"x"}',
    b'{"concurrency_key":' + b"[" * 2000 + b"]" * 2000 + b"}",
]


def test_malformed_flow_payloads_never_make_a_script_fail(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings
) -> None:
    reader = RedisReader(redis_broker.redis, redis_broker.keys, redis_settings)
    queue = redis_broker.keys.queue("default")
    redis_broker.redis.lpush(queue, *MALFORMED)
    claimed = claim(fetch, wanted=len(MALFORMED))
    # Every one is claimed as an ordinary job (the processor buries what it cannot run).
    assert sorted(u.payload for u in claimed) == sorted(MALFORMED)
    assert claim(fetch, acks=claimed) == []
    for raw in MALFORMED:
        redis_broker.redis.lpush(queue, raw)
        unit = fetch.wait(0)
        assert unit is not None and unit.payload == raw
        redis_broker.retry_at(unit, {"class": "X", "args": [], "jid": "r"}, payload.now() - 1)
        text = raw.decode()
        redis_broker.redis.zadd(redis_broker.keys.schedule, {raw: 1})
        assert reader.set_enqueue("schedule", [Move(Scored(raw, 1), text, "default")], payload.now()) == 1
        assert redis_broker.redis.lrange(queue, 0, -1) == [raw]
        assert reader.queue_delete("default", Stored(raw)) is True
        redis_broker.redis.lpush(queue, raw)
        assert reader.queue_clear("default") == 1
        redis_broker.kill(None, text)
        redis_broker.redis.zadd(redis_broker.keys.schedule, {raw: 1})
        assert reader.set_kill("schedule", [Scored(raw, 1)], payload.now()) == 1
        assert reader.set_clear("dead") == 1
    assert not redis_broker.redis.exists(redis_broker.keys.lanes)


def test_a_unique_key_stores_one_job_and_answers_with_the_holder(redis_broker: RedisBroker) -> None:
    first = job("a", unique_key="u", unique_for=30)
    assert redis_broker.push([(first, None), (job("b", unique_key="u", unique_for=30), None)]) == ["a", "a"]
    assert queued(redis_broker) == ["a"]
    ttl = redis_broker.redis.pttl(redis_broker.keys.unique("u"))
    assert 29_000 < ttl <= 30_000


def test_a_scheduled_unique_job_holds_its_key_for_its_delay_too(redis_broker: RedisBroker) -> None:
    redis_broker.push([(job("a", unique_key="u", unique_for=30), payload.now() + 100)])
    assert 129_000 < redis_broker.redis.pttl(redis_broker.keys.unique("u")) <= 130_000


def test_unique_until_done_is_released_at_the_end_not_at_a_retry(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    redis_broker.push([(job("a", unique_key="u", unique_for=30), None)])
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload) | {"retry_count": 0}, payload.now() - 1)
    assert redis_broker.redis.get(redis_broker.keys.unique("u")) == b"a"
    due_now(redis_broker, "retry")
    [a] = claim(fetch)
    claim(fetch, acks=[a])
    assert not redis_broker.redis.exists(redis_broker.keys.unique("u"))


def test_unique_until_start_is_released_at_the_claim_by_either_path(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    more = {"unique_key": "u", "unique_for": 30, "unique_until": "start"}
    redis_broker.push([(job("a", **more), None)])
    claim(fetch)
    assert not redis_broker.redis.exists(redis_broker.keys.unique("u"))
    redis_broker.push([(job("b", **more), None)])
    assert fetch.wait(0) is not None
    assert not redis_broker.redis.exists(redis_broker.keys.unique("u"))


def test_an_old_job_never_releases_a_newer_holder(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    redis_broker.push([(job("a", unique_key="u", unique_for=30), None)])
    [a] = claim(fetch)
    redis_broker.redis.set(redis_broker.keys.unique("u"), "newer")
    claim(fetch, acks=[a])
    assert redis_broker.redis.get(redis_broker.keys.unique("u")) == b"newer"


def test_jobs_over_the_rate_limit_are_postponed_spread_out(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    rated = {"rate_limit": "2/m", "rate_key": "api"}
    redis_broker.push([(job(f"j{i}", **rated), None) for i in range(5)])
    started = payload.now()
    claimed = claim(fetch, wanted=5)
    assert jids([u.payload for u in claimed]) == ["j0", "j1"]
    postponed = redis_broker.redis.zrange(redis_broker.keys.schedule, 0, -1, withscores=True)
    assert jids([raw for raw, _ in postponed]) == ["j2", "j3", "j4"]
    dues = [float(score) - started for _, score in postponed]
    # Due when the first start leaves the window, then one every window / N.
    assert dues == pytest.approx([60, 90, 120], abs=1)
    # Unchanged: not failed, no retry count.
    assert all("retry_count" not in json.loads(raw) for raw, _ in postponed)
    assert redis_broker.redis.llen(str(claimed[0].ref)) == 2


def test_a_rate_limited_job_claimed_by_the_blocking_path_is_postponed_too(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    rated = {"rate_limit": "1/h", "rate_key": "api"}
    redis_broker.push([(job("a", **rated), None), (job("b", **rated), None)])
    assert fetch.wait(0) is not None
    assert fetch.wait(0) is None
    assert redis_broker.redis.zcard(redis_broker.keys.schedule) == 1
    assert redis_broker.redis.llen(redis_broker.keys.inflight("proc-1", "default")) == 1


def test_a_postponed_keyed_job_keeps_its_slot_and_returns_to_its_queue(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    rated = {"rate_limit": "1/h", "rate_key": "api"}
    redis_broker.push([(job("x", **rated), None), (keyed("a", **rated), None), (keyed("b"), None)])
    assert jids([u.payload for u in claim(fetch, wanted=3)]) == ["x"]
    assert holders(redis_broker) == {"a"}
    redis_broker.redis.delete(redis_broker.keys.rate("api"))
    due_now(redis_broker, "schedule")
    assert queued(redis_broker) == ["a"]
    assert line(redis_broker) == ["b"]


def test_read_api_removals_free_slots_and_retry_now_goes_through_the_line(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings
) -> None:
    reader = RedisReader(redis_broker.redis, redis_broker.keys, redis_settings)
    redis_broker.push([(keyed(j), None) for j in "abcde"])
    raw_a = redis_broker.redis.lindex(redis_broker.keys.queue("default"), -1)
    assert reader.queue_delete("default", Stored(raw_a)) is True
    assert holders(redis_broker) == {"b"}
    assert reader.queue_clear("default") == 1
    # The job promoted by the clear was waiting, not in the queue: it is kept.
    assert queued(redis_broker) == ["c"]
    [c] = claim(fetch)
    redis_broker.retry_at(c, payload.loads(c.payload) | {"retry_count": 0}, payload.now() + 60)
    [(raw_c, score)] = redis_broker.redis.zrange(redis_broker.keys.retry, 0, -1, withscores=True)
    assert reader.set_kill("retry", [Scored(raw_c, score)], payload.now()) == 1
    assert holders(redis_broker) == {"d"}
    [(dead_c, dead_score)] = redis_broker.redis.zrange(redis_broker.keys.dead, 0, -1, withscores=True)
    moves = [Move(Scored(dead_c, dead_score), dead_c.decode(), "default")]
    assert reader.set_enqueue("dead", moves, payload.now()) == 1
    assert line(redis_broker) == ["e", "c"]
    busy = reader.busy_keys(100)
    assert [(b.key, b.limit, b.holders, b.waiting) for b in busy] == [("k", 1, ["d"], 2)]


def test_a_task_publishes_keyed_jobs_through_their_line_and_drops_duplicates(
    redis_broker: RedisBroker,
) -> None:
    redis_broker.push([(job("outside", unique_key="dup", unique_for=30), None)])
    staging = redis_broker.staging("task-1")
    batch = [
        job("plain"),
        keyed("a"),
        keyed("b"),
        job("u1", unique_key="once", unique_for=30),
        job("u2", unique_key="once", unique_for=30),
        job("u3", unique_key="dup", unique_for=30),
    ]
    staging.write(staging.encode(batch), None)
    # Nothing is visible before the publish.
    assert queued(redis_broker) == ["outside"]
    assert holders(redis_broker) == set()
    assert staging.publish() == 4
    assert queued(redis_broker) == ["outside", "plain", "a", "u1"]
    assert line(redis_broker) == ["b"]
    assert redis_broker.redis.get(redis_broker.keys.unique("once")) == b"u1"
    assert redis_broker.redis.get(redis_broker.keys.unique("dup")) == b"outside"
    assert not redis_broker.redis.exists(redis_broker.keys.staging_flow("task-1"))


def test_a_task_publish_fails_whole_if_its_flow_list_is_not_as_written(redis_broker: RedisBroker) -> None:
    staging = redis_broker.staging("task-2")
    staging.write(staging.encode([job("plain"), keyed("a")]), None)
    redis_broker.redis.delete(redis_broker.keys.staging_flow("task-2"))
    with pytest.raises(Exception, match="staging list"):
        staging.publish()
    assert queued(redis_broker) == []


def test_a_due_entry_the_poller_buries_still_frees_its_slot(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    redis_broker.push([(keyed("a"), None), (keyed("b"), None)])
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload) | {"retry_count": 0}, payload.now() - 1)
    [member] = redis_broker.redis.zrange(redis_broker.keys.retry, 0, -1)
    # What the poller does with an entry the client middleware raised on.
    redis_broker.redis.zrem(redis_broker.keys.retry, member)
    redis_broker.kill_unparseable(None, member, "default", "the client middleware raised")
    assert holders(redis_broker) == {"b"}
    assert queued(redis_broker) == ["b"]


@pytest.mark.parametrize("atomic", [False, True])
def test_push_answers_each_entry_behind_recorded_transitions(redis_broker: RedisBroker, atomic: bool) -> None:
    entries = [
        (job("plain"), None),
        (job("u1", unique_key="u", unique_for=30), None),
        (keyed("a"), payload.now() + 60),
        (job("u2", unique_key="u", unique_for=30), None),
    ]
    stored = redis_broker.push(entries, transitions=["t1", "t2"], atomic=atomic)
    assert stored == ["plain", "u1", "a", "u1"]
    assert redis_broker.redis.xlen(redis_broker.keys.tracking_stream) == 1


@pytest.mark.parametrize("raw_for", ["1e999", "1e300", "NaN", "-5", "0.0001"])
def test_a_unique_for_of_any_number_never_fails_a_push(redis_broker: RedisBroker, raw_for: str) -> None:
    raw = f'{{"class":"X","args":[],"jid":"a","queue":"default","unique_key":"u","unique_for":{raw_for}}}'
    assert redis_broker.scripts.push(args=[redis_broker.keys.prefix, raw, "", "0"]) == b"a"
    assert queued(redis_broker) == ["a"]
    ttl = redis_broker.redis.pttl(redis_broker.keys.unique("u"))
    assert ttl == -2 or 0 <= ttl <= 315360000000


def test_a_clear_where_flow_control_was_never_used_unlinks_at_once(
    redis_broker: RedisBroker, redis_settings: Settings
) -> None:
    reader = RedisReader(redis_broker.redis, redis_broker.keys, redis_settings)
    redis_broker.push([(job(str(n)), None) for n in range(3)])
    assert reader.queue_clear("default") == 3
    assert not redis_broker.redis.exists(redis_broker.keys.flow_used, redis_broker.keys.queue("default"))
    redis_broker.push([(keyed("a"), None), (keyed("b"), None)])
    assert redis_broker.redis.exists(redis_broker.keys.flow_used)
    assert reader.queue_clear("default") == 1
    assert queued(redis_broker) == ["b"]


@pytest.mark.parametrize("removal", ["delete", "clear"])
def test_removing_a_held_retry_frees_its_slot_and_unique_key(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings, removal: str
) -> None:
    reader = RedisReader(redis_broker.redis, redis_broker.keys, redis_settings)
    redis_broker.push([(keyed("a", unique_key="u", unique_for=30), None), (keyed("b"), None)])
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload) | {"retry_count": 0}, payload.now() + 60)
    assert holders(redis_broker) == {"a"}
    if removal == "delete":
        [(raw, score)] = redis_broker.redis.zrange(redis_broker.keys.retry, 0, -1, withscores=True)
        assert reader.set_delete("retry", Scored(raw, score)) is True
    else:
        assert reader.set_clear("retry") == 1
    assert holders(redis_broker) == {"b"}
    assert queued(redis_broker) == ["b"]
    assert not redis_broker.redis.exists(redis_broker.keys.unique("u"))
