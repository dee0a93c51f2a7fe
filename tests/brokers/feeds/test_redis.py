"""Redis task feeds at the keys: held jobs, releases in the step that ends a job, interval
ticks, live tuning, cancel, retries and every end path (docs/internals/feeds-redis.md).

The shared suite (test_shared.py) proves the behaviour through workers; these
look at the held list, the out hash and the queues, where a leaked or doubled slot shows at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import pytest

import asynctask
from asynctask import Registry, Settings, payload
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.reads import Stored
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.redis.fetch import ReliableFetch, ends_flow
from asynctask.brokers.redis.reads import RedisReader
from asynctask.feeds import Feed, FeedChange
from asynctask.worker import Worker
from tests.brokers.redis_keys import entry_jids, jids, queued
from tests.conftest import wait_until

TASK = "t1"


def job(jid: str, task: str = TASK, **more: Any) -> payload.JobDict:
    return {
        "class": "X",
        "args": [],
        "jid": jid,
        "queue": "default",
        "retry": True,
        "task": task,
        "feed": task,
        **more,
    }


def publish(broker: RedisBroker, jids: list[str], feed: Feed, task: str = TASK, **more: Any) -> int:
    """Stage a fed task's jobs in two batches and publish them, as create_task does."""
    staging = broker.staging(task, feed)
    half = len(jids) // 2
    for batch in (jids[:half], jids[half:]):
        if batch:
            staging.write(staging.encode([job(j, task, **more) for j in batch]), cast(Any, None))
    return staging.publish()


def held(broker: RedisBroker, task: str = TASK) -> list[str]:
    """Jids a feed holds, next first."""
    return entry_jids(broker, broker.keys.feed_held(task))


def out(broker: RedisBroker, task: str = TASK) -> set[str]:
    return {jid.decode() for jid in broker.redis.hkeys(broker.keys.feed_out(task))}


def claim(fetch: ReliableFetch, wanted: int = 1, acks: list[UnitOfWork] | None = None) -> list[UnitOfWork]:
    return fetch.claim(wanted, acks or [], [])


def due_now(broker: RedisBroker, set_name: str = "retry") -> None:
    key = broker.keys.retry if set_name == "retry" else broker.keys.schedule
    for member in broker.redis.zrange(key, 0, -1):
        broker.redis.zadd(key, {member: 1})
    broker.enqueue_due("retry" if set_name == "retry" else "schedule", payload.loads)


def allow_release(broker: RedisBroker, task: str = TASK) -> None:
    """Pretend the feed's interval has passed since its last release."""
    broker.redis.hset(broker.keys.feed(task), "last", "0")


# 1. Publish


def test_publish_holds_the_jobs_in_order_and_releases_parallel_of_them(redis_broker: RedisBroker) -> None:
    assert publish(redis_broker, ["a", "b", "c", "d", "e"], Feed(parallel=2)) == 5
    assert queued(redis_broker) == ["a", "b"]
    assert held(redis_broker) == ["c", "d", "e"]
    assert out(redis_broker) == {"a", "b"}
    assert not redis_broker.redis.exists(redis_broker.keys.staging_feed(TASK))
    assert redis_broker.redis.ttl(redis_broker.keys.feed_held(TASK)) == -1
    state = redis_broker.feeds.state(TASK)
    assert state is not None
    assert (state.feed, state.held, state.out) == (Feed(parallel=2), 3, 2)


def test_a_staging_list_that_lost_jobs_publishes_nothing(redis_broker: RedisBroker) -> None:
    staging = redis_broker.staging(TASK, Feed(parallel=1))
    staging.write(staging.encode([job("a"), job("b")]), cast(Any, None))
    redis_broker.redis.lpop(redis_broker.keys.staging_feed(TASK))
    with pytest.raises(redis_broker.errors):
        staging.publish()
    assert redis_broker.feeds.state(TASK) is None
    assert queued(redis_broker) == []


def test_a_task_already_published_cannot_publish_again(redis_broker: RedisBroker) -> None:
    publish(redis_broker, ["a"], Feed(parallel=1))
    with pytest.raises(redis_broker.errors):
        publish(redis_broker, ["b"], Feed(parallel=1))
    assert queued(redis_broker) == ["a"]


def test_discard_deletes_the_staging_list(redis_broker: RedisBroker) -> None:
    staging = redis_broker.staging(TASK, Feed(parallel=1))
    staging.write(staging.encode([job("a")]), cast(Any, None))
    assert redis_broker.redis.ttl(redis_broker.keys.staging_feed(TASK)) > 0
    staging.discard()
    assert not redis_broker.redis.exists(redis_broker.keys.staging_feed(TASK))


# 2 and 3. Release on every end, in the same script


def test_the_claim_that_acknowledges_a_fed_job_releases_and_claims_the_next(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=1))
    [a] = claim(fetch)
    # One round trip: the ack frees a's slot, b is released to the queue and claimed.
    [b] = claim(fetch, acks=[a])
    assert json.loads(b.payload)["jid"] == "b"
    assert out(redis_broker) == {"b"}
    assert held(redis_broker) == ["c"]
    [c] = claim(fetch, acks=[b])
    claim(fetch, acks=[c])
    assert out(redis_broker) == set()
    assert redis_broker.feeds.state(TASK) is not None
    # Nothing held, nothing out: the feed is forgotten after a week.
    assert 600_000 < redis_broker.redis.ttl(redis_broker.keys.feed(TASK)) <= 604_800


def decoded(unit: UnitOfWork) -> UnitOfWork:
    """``unit`` as the worker acknowledges it once it decoded the payload."""
    return unit.decoded(payload.loads(unit.payload))


def test_the_worker_names_the_feed_and_jid_of_a_plain_fed_job_only() -> None:
    def unit(**fields: Any) -> UnitOfWork:
        return UnitOfWork("default", b"{}", "inflight").decoded(job("a", **fields))

    assert unit().fed == (TASK, "a")
    assert unit(concurrency_key="k", concurrency_limit=1).fed is None
    assert unit(unique_key="u").fed is None
    assert unit(feed="\ud800").fed is None
    assert UnitOfWork("default", b"{}", "inflight").decoded({"class": "X", "jid": "a"}).fed is None
    # Not part of the unit's identity: the claim check matches units with and without it.
    assert unit() == UnitOfWork("default", b"{}", "inflight")


def test_a_worker_acknowledges_a_plain_fed_job_with_its_feed_and_jid(
    redis_broker: RedisBroker,
    registry: Registry,
    start_redis_worker: Callable[..., Worker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []
    acknowledged: list[tuple[str, str] | None] = []

    @asynctask.job(registry=registry, name="X")
    def x() -> None:
        ran.append(asynctask.current_job().jid)

    claim_as_is = ReliableFetch.claim

    def spy(
        self: ReliableFetch, wanted: int, acks: list[UnitOfWork], transitions: list[str]
    ) -> list[UnitOfWork]:
        acknowledged.extend(unit.fed for unit in acks)
        return claim_as_is(self, wanted, acks, transitions)

    monkeypatch.setattr(ReliableFetch, "claim", spy)
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=1))
    start_redis_worker(concurrency=1)
    # Each job is released by the end of the one before it: the last starts only after two acks.
    wait_until(lambda: len(ran) == 3)
    assert acknowledged[:2] == [(TASK, "a"), (TASK, "b")]


def test_a_plain_fed_acknowledgement_frees_the_slot_the_worker_names(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=1))
    [a] = claim(fetch)
    assert a.fed is None
    [b] = claim(fetch, acks=[decoded(a)])
    assert jids([b.payload]) == ["b"]
    assert (out(redis_broker), held(redis_broker)) == ({"b"}, ["c"])
    # A duplicate acknowledgement (the job is no longer in flight) frees nothing.
    claim(fetch, acks=[decoded(a)], wanted=0)
    assert (out(redis_broker), held(redis_broker)) == ({"b"}, ["c"])
    # The script takes the feed and jid from the worker, not from the payload.
    other = UnitOfWork(b.queue, b.payload, b.ref, ("other", "b"))
    claim(fetch, acks=[other], wanted=0)
    assert (out(redis_broker), held(redis_broker)) == ({"b"}, ["c"])


def test_ends_refill_a_feed_in_steps_of_a_tenth_of_parallel(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, [f"j{n:02}" for n in range(40)], Feed(parallel=20))
    assert len(out(redis_broker)) == 20
    first = claim(fetch, wanted=3)
    # One end frees one slot: under the step (2), nothing is released...
    claim(fetch, acks=[decoded(first[0])], wanted=0)
    assert (len(out(redis_broker)), len(held(redis_broker))) == (19, 20)
    # ...but the next tick is to look at the feed at once.
    assert redis_broker.redis.zscore(redis_broker.keys.feeds, TASK) == 0
    # The second end reaches the step: both free slots are refilled.
    claim(fetch, acks=[first[1]], wanted=0)
    assert (len(out(redis_broker)), len(held(redis_broker))) == (20, 18)
    assert (redis_broker.redis.zscore(redis_broker.keys.feeds, TASK) or 0) > payload.now() + 20
    # Two ends in one call refill both at once.
    claim(fetch, acks=[decoded(first[2]), *map(decoded, claim(fetch))], wanted=0)
    assert (len(out(redis_broker)), len(held(redis_broker))) == (20, 16)


def test_a_tick_tops_up_the_slots_short_of_a_step(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, [f"j{n:02}" for n in range(40)], Feed(parallel=20))
    [a] = claim(fetch)
    claim(fetch, acks=[decoded(a)], wanted=0)
    assert len(out(redis_broker)) == 19
    assert redis_broker.feeds.tick() == 1
    assert (len(out(redis_broker)), len(held(redis_broker))) == (20, 19)


def test_the_last_held_jobs_are_released_below_the_step(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, [f"j{n:02}" for n in range(21)], Feed(parallel=20))
    [a] = claim(fetch)
    # One job held: the step is min(2, 1), one free slot releases it.
    claim(fetch, acks=[decoded(a)], wanted=0)
    assert (len(out(redis_broker)), held(redis_broker)) == (20, [])


def bell_tokens(broker: RedisBroker) -> int:
    return int(broker.redis.llen(broker.keys.bell("default")))


def test_a_claim_takes_the_jobs_its_ends_release_while_nothing_else_waits(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, [f"j{n:02}" for n in range(40)], Feed(parallel=20))
    first = claim(fetch, wanted=20)
    redis_broker.redis.delete(redis_broker.keys.bell("default"))
    # Two ends, under the step: the claim that wants jobs has them released at once, straight
    # into its process's in-flight list; they never wait in the queue, and wake no one.
    taken = claim(fetch, acks=[decoded(u) for u in first[:2]], wanted=3)
    assert jids([u.payload for u in taken]) == ["j20", "j21"]
    assert {u.ref for u in taken} == {redis_broker.keys.inflight("proc-1", "default")}
    assert (queued(redis_broker), bell_tokens(redis_broker)) == ([], 0)
    assert (len(out(redis_broker)), len(held(redis_broker))) == (20, 18)
    # Exactly the freed slots: a claim that wants more than its ends freed takes no more.
    assert jids([u.payload for u in claim(fetch, acks=[decoded(first[2])], wanted=5)]) == ["j22"]
    assert len(out(redis_broker)) == 20


def test_released_jobs_queue_behind_other_waiting_jobs(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    redis_broker.push([(job("p", task="other", feed=None), None)])
    [a] = claim(fetch)
    # A job of the queue waits: b is released to the queue, behind it, and the claim takes it.
    assert jids([u.payload for u in claim(fetch, acks=[decoded(a)])]) == ["p"]
    assert queued(redis_broker) == ["b"]
    assert out(redis_broker) == {"b"}


def test_a_claim_takes_no_released_job_of_a_paused_queue(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    [a] = claim(fetch)
    redis_broker.redis.sadd(redis_broker.keys.paused, "default")
    assert claim(fetch, acks=[decoded(a)]) == []
    assert queued(redis_broker) == ["b"]
    assert not redis_broker.redis.llen(redis_broker.keys.inflight("proc-1", "default"))


def test_a_fed_job_is_acknowledged_through_the_flow_end(redis_broker: RedisBroker) -> None:
    fed = payload.dumps(job("a")).encode()
    plain = payload.dumps({"class": "X", "args": [], "jid": "p", "queue": "default"}).encode()
    assert ends_flow(fed)
    assert not ends_flow(plain)


@pytest.mark.parametrize("end", ["release", "kill", "settle", "retry", "delete", "clear"])
def test_every_end_path_frees_the_slot_and_releases(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings, end: str
) -> None:
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=1))
    if end in ("delete", "clear"):
        reader = RedisReader(redis_broker.redis, redis_broker.keys, redis_settings)
        if end == "delete":
            [raw] = redis_broker.redis.lrange(redis_broker.keys.queue("default"), 0, -1)
            assert reader.queue_delete("default", Stored(raw))
        else:
            assert reader.queue_clear("default") == 1
        assert queued(redis_broker) == ["b"]
    else:
        [a] = claim(fetch)
        if end == "release":
            redis_broker.release(a)
        elif end == "kill":
            redis_broker.kill(a, payload.dumps_storable(payload.loads(a.payload)))
        elif end == "settle":
            fetch.settle([a], [])
        else:
            redis_broker.retry_at(a, payload.loads(a.payload), payload.now() + 60)
        assert redis_broker.redis.llen(str(a.ref)) == 0
        assert queued(redis_broker) == ["b"]
    assert out(redis_broker) == {"b"}
    assert held(redis_broker) == ["c"]


def test_an_end_for_a_job_not_out_frees_nothing(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=1))
    [a] = claim(fetch)
    redis_broker.release(a)
    # The same end again (a duplicate ack): a is no longer out, nothing more is released.
    redis_broker.kill(None, payload.dumps_storable(payload.loads(a.payload)))
    assert out(redis_broker) == {"b"}
    assert held(redis_broker) == ["c"]


def test_an_unparseable_job_buried_by_the_poller_frees_its_slot(redis_broker: RedisBroker) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    [raw] = redis_broker.redis.lrange(redis_broker.keys.queue("default"), 0, -1)
    redis_broker.redis.lrem(redis_broker.keys.queue("default"), 1, raw)
    redis_broker.redis.zadd(redis_broker.keys.schedule, {raw: 1})
    redis_broker.redis.zrem(redis_broker.keys.schedule, raw)
    redis_broker.kill_unparseable(None, raw, "default", "cannot decode")
    assert out(redis_broker) == {"b"}


# 4. Retries, give-back and recovery


def test_a_retry_frees_its_slot_and_rejoins_the_front_when_due(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=1))
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload), payload.now() + 60)
    assert out(redis_broker) == {"b"}
    assert held(redis_broker) == ["c"]
    due_now(redis_broker)
    # The feed is full (b is out): a waits at the front of the held jobs, not in the queue.
    assert redis_broker.redis.zcard(redis_broker.keys.retry) == 0
    assert held(redis_broker) == ["a", "c"]
    assert queued(redis_broker) == ["b"]
    [b] = claim(fetch)
    claim(fetch, acks=[b], wanted=0)
    assert queued(redis_broker) == ["a"]
    assert out(redis_broker) == {"a"}


def test_a_due_retry_with_room_is_released_in_the_same_step(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a"], Feed(parallel=1))
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload), payload.now() + 60)
    assert out(redis_broker) == set()
    due_now(redis_broker)
    assert queued(redis_broker) == ["a"]
    assert out(redis_broker) == {"a"}
    assert held(redis_broker) == []


def test_a_due_retry_whose_feed_is_gone_is_enqueued_as_usual(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload), payload.now() + 60)
    assert redis_broker.feeds.cancel(TASK) == 0
    redis_broker.redis.delete(redis_broker.keys.queue("default"))
    due_now(redis_broker)
    assert queued(redis_broker) == ["a"]
    assert not redis_broker.redis.exists(redis_broker.keys.feed(TASK), redis_broker.keys.feed_held(TASK))


@pytest.mark.parametrize("how", ["give_back", "recovery"])
def test_a_job_given_back_or_recovered_keeps_its_slot(
    redis_broker: RedisBroker, fetch: ReliableFetch, how: str
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    [a] = claim(fetch)
    if how == "give_back":
        assert fetch.requeue([a]) == 1
    else:
        assert fetch.requeue_all(forget=True) == 1
    assert queued(redis_broker) == ["a"]
    assert out(redis_broker) == {"a"}
    assert held(redis_broker) == ["b"]
    [again] = claim(fetch)
    claim(fetch, acks=[again], wanted=0)
    assert queued(redis_broker) == ["b"]


def test_a_job_postponed_by_its_rate_limit_keeps_its_slot(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=2), rate_limit="1/h", rate_key="r")
    [a] = claim(fetch, wanted=2)
    assert jids([a.payload]) == ["a"]
    # b was over its rate limit: back in the schedule set, still out.
    assert redis_broker.redis.zcard(redis_broker.keys.schedule) == 1
    assert out(redis_broker) == {"a", "b"}
    redis_broker.redis.delete(redis_broker.keys.rate("r"))
    due_now(redis_broker, "schedule")
    assert queued(redis_broker) == ["b"]
    assert held(redis_broker) == ["c"]


# 5. Push into a feed


def test_a_pushed_job_of_a_live_feed_joins_the_front_of_its_held_jobs(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    redis_broker.push([(job("r1"), None), (job("r2"), None)], atomic=True)
    assert held(redis_broker) == ["r2", "r1", "b"]
    assert queued(redis_broker) == ["a"]
    [a] = claim(fetch)
    claim(fetch, acks=[a], wanted=0)
    assert queued(redis_broker) == ["r2"]


def test_a_pushed_job_of_a_feed_with_room_is_released_at_once(redis_broker: RedisBroker) -> None:
    publish(redis_broker, ["a"], Feed(parallel=2))
    redis_broker.push([(job("r"), None)])
    assert queued(redis_broker) == ["a", "r"]
    assert out(redis_broker) == {"a", "r"}


def test_a_pushed_job_whose_feed_is_gone_is_an_ordinary_push(redis_broker: RedisBroker) -> None:
    assert redis_broker.push([(job("r"), None)]) == ["r"]
    assert queued(redis_broker) == ["r"]
    assert not redis_broker.redis.exists(
        redis_broker.keys.feed(TASK), redis_broker.keys.feed_held(TASK), redis_broker.keys.feed_out(TASK)
    )


# 2 and 9. Interval and tick


def test_an_interval_holds_releases_back_until_a_tick(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b", "c", "d"], Feed(parallel=2, interval=3600))
    [a, b] = claim(fetch, wanted=2)
    claim(fetch, acks=[a, b], wanted=0)
    assert queued(redis_broker) == []
    assert out(redis_broker) == set()
    last = float(redis_broker.redis.hget(redis_broker.keys.feed(TASK), "last") or 0)
    # A tick is due when the interval has passed.
    assert redis_broker.redis.zscore(redis_broker.keys.feeds, TASK) == pytest.approx(last + 3600)
    assert redis_broker.feeds.tick() == 0
    assert held(redis_broker) == ["c", "d"]
    allow_release(redis_broker)
    redis_broker.redis.zadd(redis_broker.keys.feeds, {TASK: 1})
    # One release tops up to parallel.
    assert redis_broker.feeds.tick() == 2
    assert queued(redis_broker) == ["c", "d"]
    assert redis_broker.redis.zscore(redis_broker.keys.feeds, TASK) is None


def test_an_end_after_the_interval_releases_at_once(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1, interval=3600))
    [a] = claim(fetch)
    allow_release(redis_broker)
    claim(fetch, acks=[a], wanted=0)
    assert queued(redis_broker) == ["b"]


def test_a_tick_is_a_safety_net_for_a_feed_with_room(redis_broker: RedisBroker) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    # The feed holds jobs: a tick looks at it within the safety delay.
    score = redis_broker.redis.zscore(redis_broker.keys.feeds, TASK)
    assert score is not None and score > payload.now() + 20
    redis_broker.redis.hdel(redis_broker.keys.feed_out(TASK), "a")
    assert redis_broker.feeds.tick() == 0
    redis_broker.redis.zadd(redis_broker.keys.feeds, {TASK: 1})
    assert redis_broker.feeds.tick() == 1
    assert queued(redis_broker) == ["a", "b"]
    assert redis_broker.redis.zscore(redis_broker.keys.feeds, TASK) is None


def test_a_tick_forgets_a_feed_that_is_gone(redis_broker: RedisBroker) -> None:
    redis_broker.redis.zadd(redis_broker.keys.feeds, {"gone": 1})
    assert redis_broker.feeds.tick() == 0
    assert redis_broker.redis.zcard(redis_broker.keys.feeds) == 0


def test_a_tick_releases_a_bounded_number_of_feeds(redis_broker: RedisBroker) -> None:
    for n in range(60):
        publish(redis_broker, [f"{n}-a", f"{n}-b"], Feed(parallel=1, interval=3600), task=f"t{n}")
        redis_broker.redis.hdel(redis_broker.keys.feed_out(f"t{n}"), f"{n}-a")
        allow_release(redis_broker, f"t{n}")
        redis_broker.redis.zadd(redis_broker.keys.feeds, {f"t{n}": 1})
    assert redis_broker.feeds.tick() == 50
    assert redis_broker.feeds.tick() == 10


# 7. Live tuning


def test_pause_stops_releases_and_resume_tops_up(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a", "b", "c", "d"], Feed(parallel=2))
    state = redis_broker.feeds.update(TASK, FeedChange(paused=True))
    assert state is not None and state.feed.paused
    [a, b] = claim(fetch, wanted=2)
    claim(fetch, acks=[a, b], wanted=0)
    assert queued(redis_broker) == []
    assert redis_broker.redis.zscore(redis_broker.keys.feeds, TASK) is None
    state = redis_broker.feeds.update(TASK, FeedChange(paused=False))
    assert state is not None
    assert (state.feed.paused, state.held, state.out) == (False, 0, 2)
    assert queued(redis_broker) == ["c", "d"]


def test_a_higher_parallel_releases_at_once(redis_broker: RedisBroker) -> None:
    publish(redis_broker, ["a", "b", "c", "d"], Feed(parallel=1))
    state = redis_broker.feeds.update(TASK, FeedChange(parallel=3))
    assert state is not None and (state.feed.parallel, state.held, state.out) == (3, 1, 3)
    assert queued(redis_broker) == ["a", "b", "c"]


def test_a_lower_parallel_takes_effect_as_jobs_end(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a", "b", "c", "d"], Feed(parallel=3))
    state = redis_broker.feeds.update(TASK, FeedChange(parallel=1))
    assert state is not None and (state.held, state.out) == (1, 3)
    assert queued(redis_broker) == ["a", "b", "c"]
    [a, b] = claim(fetch, wanted=2)
    claim(fetch, acks=[a, b], wanted=0)
    # c still out: no room under parallel 1.
    assert held(redis_broker) == ["d"]
    [c] = claim(fetch)
    claim(fetch, acks=[c], wanted=0)
    assert queued(redis_broker) == ["d"]


def test_an_interval_change_applies_to_the_next_release(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1, interval=3600))
    [a] = claim(fetch)
    claim(fetch, acks=[a], wanted=0)
    assert queued(redis_broker) == []
    state = redis_broker.feeds.update(TASK, FeedChange(interval=0))
    assert state is not None and state.feed.interval == 0
    assert queued(redis_broker) == ["b"]


def test_update_and_state_of_a_task_without_feed_are_none(redis_broker: RedisBroker) -> None:
    assert redis_broker.feeds.update("none", FeedChange(parallel=2)) is None
    assert redis_broker.feeds.state("none") is None
    assert redis_broker.feeds.cancel("none") == 0


# 6. Priority


def plain(jid: str) -> payload.JobDict:
    return {"class": "X", "args": [], "jid": jid, "queue": "default"}


def test_a_negative_priority_releases_to_the_head_of_the_queue(redis_broker: RedisBroker) -> None:
    redis_broker.push([(plain("x"), None), (plain("y"), None)])
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=2, priority=-1))
    assert queued(redis_broker) == ["b", "a", "x", "y"]


def test_a_priority_of_zero_or_more_releases_to_the_tail(redis_broker: RedisBroker) -> None:
    redis_broker.push([(plain("x"), None)])
    publish(redis_broker, ["a", "b"], Feed(parallel=2, priority=5))
    assert queued(redis_broker) == ["x", "a", "b"]


def test_a_priority_change_moves_the_waiting_released_jobs(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    redis_broker.push([(plain("x"), None), (plain("y"), None)])
    publish(redis_broker, ["a", "b", "c", "d"], Feed(parallel=3))
    publish(redis_broker, ["o"], Feed(parallel=1), task="other")
    assert queued(redis_broker) == ["x", "y", "a", "b", "c", "o"]
    [x] = claim(fetch)
    assert jids([x.payload]) == ["x"]
    state = redis_broker.feeds.update(TASK, FeedChange(priority=-3))
    assert state is not None and state.feed.priority == -3
    # Released jobs keep their order at the head; another feed's job stays where it was.
    assert queued(redis_broker) == ["a", "b", "c", "y", "o"]
    state = redis_broker.feeds.update(TASK, FeedChange(priority=1))
    assert queued(redis_broker) == ["y", "o", "a", "b", "c"]
    assert out(redis_broker) == {"a", "b", "c"}


def test_a_priority_move_reaches_only_the_ends_of_a_long_queue(
    redis_broker: RedisBroker, monkeypatch: Any
) -> None:
    from asynctask.brokers.redis import feeds

    monkeypatch.setattr(feeds, "MOVE_REACH", 2)
    publish(redis_broker, ["a", "b"], Feed(parallel=3))
    redis_broker.push([(plain(f"p{n}"), None) for n in range(3)])
    publish(redis_broker, ["c"], Feed(parallel=1), task="other")
    redis_broker.push([(plain(f"q{n}"), None) for n in range(3)])
    redis_broker.push([(job("r"), None)])
    # Queue, next first: a b p0 p1 p2 c q0 q1 q2 r: a and b are within 2 of the head, r of the tail.
    redis_broker.feeds.update(TASK, FeedChange(priority=-1))
    assert queued(redis_broker) == ["a", "b", "r", "p0", "p1", "p2", "c", "q0", "q1", "q2"]
    redis_broker.push([(plain(f"s{n}"), None) for n in range(3)])
    redis_broker.feeds.update(TASK, FeedChange(priority=0))
    # r is now third from the head, beyond the reach: it stays.
    assert queued(redis_broker) == ["r", "p0", "p1", "p2", "c", "q0", "q1", "q2", "s0", "s1", "s2", "a", "b"]


def test_a_priority_move_leaves_a_job_of_the_feed_that_is_not_out(redis_broker: RedisBroker) -> None:
    publish(redis_broker, ["a"], Feed(parallel=1))
    # Written by another client straight to the queue: it names the feed but holds no slot.
    redis_broker.redis.lpush(redis_broker.keys.queue("default"), payload.dumps(job("stray")))
    redis_broker.push([(plain("x"), None)])
    redis_broker.feeds.update(TASK, FeedChange(priority=-1))
    assert queued(redis_broker) == ["a", "stray", "x"]
    redis_broker.feeds.update(TASK, FeedChange(priority=0))
    assert queued(redis_broker) == ["stray", "x", "a"]


def test_a_priority_on_the_same_side_moves_nothing(redis_broker: RedisBroker) -> None:
    publish(redis_broker, ["a"], Feed(parallel=1))
    redis_broker.push([(plain("x"), None)])
    redis_broker.feeds.update(TASK, FeedChange(priority=7))
    assert queued(redis_broker) == ["a", "x"]


# 8. Cancel


def test_cancel_drops_the_held_jobs_and_stops_releasing(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b", "c", "d"], Feed(parallel=2))
    assert redis_broker.feeds.cancel(TASK) == 2
    assert redis_broker.feeds.state(TASK) is None
    assert not redis_broker.redis.exists(redis_broker.keys.feed_held(TASK), redis_broker.keys.feed_out(TASK))
    assert redis_broker.redis.zscore(redis_broker.keys.feeds, TASK) is None
    [a, b] = claim(fetch, wanted=2)
    claim(fetch, acks=[a, b], wanted=0)
    assert queued(redis_broker) == []
    assert redis_broker.feeds.state(TASK) is None


# Keyed jobs of a fed task


def test_released_keyed_jobs_go_through_their_line(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a", "b", "c"], Feed(parallel=2), concurrency_key="k", concurrency_limit=1)
    assert queued(redis_broker) == ["a"]
    assert redis_broker.redis.llen(redis_broker.keys.lane("k")) == 1
    assert out(redis_broker) == {"a", "b"}
    [a] = claim(fetch)
    # One end: a's key slot promotes b from the line, a's feed slot releases c into the line.
    claim(fetch, acks=[a], wanted=0)
    assert queued(redis_broker) == ["b"]
    assert redis_broker.redis.llen(redis_broker.keys.lane("k")) == 1
    assert out(redis_broker) == {"b", "c"}
    assert {m.decode() for m in redis_broker.redis.smembers(redis_broker.keys.lane_holders("k"))} == {"b"}


def test_a_keyed_retry_holding_its_key_slot_goes_straight_to_its_queue(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1), concurrency_key="k", concurrency_limit=1)
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload), payload.now() + 60)
    # a keeps its key slot ("hold"), frees its feed slot: b is released into the key's line.
    assert out(redis_broker) == {"b"}
    assert redis_broker.redis.llen(redis_broker.keys.lane("k")) == 1
    assert queued(redis_broker) == []
    redis_broker.feeds.update(TASK, FeedChange(parallel=2))
    due_now(redis_broker)
    assert queued(redis_broker) == ["a"]
    assert out(redis_broker) == {"a", "b"}


# 12. Malformed payloads and records


def test_malformed_feed_fields_are_ordinary_jobs(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    odd = [
        {**plain("n1"), "feed": 123},
        {**plain("n2"), "feed": ""},
        {**plain("n3"), "feed": TASK, "jid": 5},
        {**plain("n4"), "feed": ["x"]},
    ]
    redis_broker.push([(j, None) for j in odd])
    assert held(redis_broker) == ["b"]
    redis_broker.redis.lpush(redis_broker.keys.queue("default"), b'{"feed":"t1","jid":', b'\xff\xfefeed"')
    for unit in claim(fetch, wanted=10):
        redis_broker.release(unit)
    assert out(redis_broker) == {"b"}


def test_a_broken_held_entry_still_runs_and_a_broken_record_fails_nothing(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, ["a", "b"], Feed(parallel=1))
    redis_broker.redis.lpush(redis_broker.keys.feed_held(TASK), b"garbage")
    [a] = claim(fetch)
    claim(fetch, acks=[a], wanted=0)
    assert redis_broker.redis.lrange(redis_broker.keys.queue("default"), 0, -1) == [b"garbage"]
    redis_broker.redis.hset(
        redis_broker.keys.feed(TASK), mapping={"parallel": "x", "interval": "y", "priority": "z"}
    )
    redis_broker.redis.delete(redis_broker.keys.queue("default"))
    redis_broker.redis.hset(redis_broker.keys.feed_out(TASK), "a", "default")
    claim(fetch, acks=[a], wanted=0)
    redis_broker.redis.zadd(redis_broker.keys.feeds, {TASK: 1})
    assert redis_broker.feeds.tick() == 0
    assert held(redis_broker) == ["b"]


# 10 and 13. State and forgetting


def test_state_counts_held_and_out(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, [str(n) for n in range(10)], Feed(parallel=3, interval=0.5, priority=-2))
    state = redis_broker.feeds.state(TASK)
    assert state is not None
    assert state.feed == Feed(parallel=3, interval=0.5, priority=-2)
    assert (state.held, state.out) == (7, 3)
    units = claim(fetch, wanted=3)
    redis_broker.feeds.update(TASK, FeedChange(interval=0))
    claim(fetch, acks=units, wanted=0)
    state = redis_broker.feeds.state(TASK)
    assert state is not None and (state.held, state.out) == (4, 3)


def test_a_forgotten_feed_has_no_state(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a"], Feed(parallel=1))
    [a] = claim(fetch)
    claim(fetch, acks=[a], wanted=0)
    assert redis_broker.redis.ttl(redis_broker.keys.feed(TASK)) > 0
    redis_broker.redis.delete(redis_broker.keys.feed(TASK))
    assert redis_broker.feeds.state(TASK) is None
    # A push of the task's job now is an ordinary one.
    redis_broker.push([(job("r"), None)])
    assert queued(redis_broker) == ["r"]


def test_a_job_rejoining_an_idle_feed_keeps_it(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, ["a"], Feed(parallel=1))
    [a] = claim(fetch)
    redis_broker.retry_at(a, payload.loads(a.payload), payload.now() + 60)
    assert redis_broker.redis.ttl(redis_broker.keys.feed(TASK)) > 0
    due_now(redis_broker)
    assert redis_broker.redis.ttl(redis_broker.keys.feed(TASK)) == -1
    assert out(redis_broker) == {"a"}
