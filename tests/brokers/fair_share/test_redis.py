"""Fair share on Redis at the keys and through workers: a task's jobs wait in its share, the
claim serves the shares in turn, fifo queues keep push order, idle workers wake for a share's
jobs, the read API counts and clears shares, and a killed worker loses nothing
(docs/internals/fair-share-redis.md).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest

from asynctask import Settings, payload
from asynctask.api import Queue, Stats
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.reads import Stored
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.redis.fetch import ReliableFetch
from asynctask.brokers.redis.reads import RedisReader
from asynctask.feeds import Feed, FeedChange
from asynctask.settings import QueueSpec
from tests.brokers.conftest import BROKER_JOBS, ROOT, read_runs, worker_env
from tests.brokers.redis_keys import jids
from tests.conftest import wait_until
from tests.processes import Sessions, worker_argv

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone


@pytest.fixture
def redis_broker(redis_settings: Settings) -> Iterator[RedisBroker]:
    made = RedisBroker(redis_settings)
    yield made
    made.close()


@pytest.fixture
def blocking_broker(redis_settings: Settings) -> Iterator[RedisBroker]:
    """A second broker on the namespace whose threads block in Redis up to 5 s (two of them)."""
    made = RedisBroker(replace(redis_settings, fetch_timeout=5.0, concurrency=2))
    yield made
    made.close()


@pytest.fixture
def reader(redis_broker: RedisBroker, redis_settings: Settings) -> RedisReader:
    return RedisReader(redis_broker.redis, redis_broker.keys, redis_settings)


def job(jid: str, queue: str = "default", **more: Any) -> payload.JobDict:
    return {"class": "X", "args": [], "jid": jid, "queue": queue, "retry": True, **more}


def publish(broker: RedisBroker, task: str, jids: list[str], share: str | None = None, **more: Any) -> int:
    """Stage a task's jobs in two batches and publish them, as create_task does."""
    staging = broker.staging(task, None, share)
    half = len(jids) // 2
    for batch in (jids[:half], jids[half:]):
        if batch:
            staging.write(staging.encode([job(j, **more) for j in batch]), cast(Any, None))
    return staging.publish()


def waiting(broker: RedisBroker, key: str) -> list[str]:
    """Jids of a list, next to run first."""
    return jids(broker.redis.lrange(key, 0, -1))[::-1]


def ring(broker: RedisBroker, queue: str = "default") -> list[str]:
    """The ring's members, next to serve first."""
    return [m.decode() for m in broker.redis.lrange(broker.keys.shares(queue), 0, -1)][::-1]


def claim_all(fetch: ReliableFetch, wanted: int = 1) -> list[str]:
    """Jids in claim order, claiming ``wanted`` per call until nothing is left."""
    order: list[str] = []
    while units := fetch.claim(wanted, [], []):
        order += [json.loads(unit.payload)["jid"] for unit in units]
    return order


def test_a_task_publish_fills_its_share_and_joins_the_ring(redis_broker: RedisBroker) -> None:
    redis_broker.push([(job("p1"), None)])
    assert publish(redis_broker, "ta", ["a1", "a2", "a3"], "task:ta") == 3
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:ta")) == ["a1", "a2", "a3"]
    # Sidekiq's own list holds only the jobs outside any task.
    assert waiting(redis_broker, redis_broker.keys.queue("default")) == ["p1"]
    assert ring(redis_broker) == ["", "task:ta"]
    # The staging list's expiry did not come along with the RENAME.
    assert redis_broker.redis.ttl(redis_broker.keys.share("default", "task:ta")) == -1
    # A second publish of the same share appends to it (1,000 jobs a step) without a second turn.
    more = [f"m{n}" for n in range(2500)]
    publish(redis_broker, "tb", more, "task:ta")
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:ta")) == ["a1", "a2", "a3", *more]
    assert ring(redis_broker) == ["", "task:ta"]
    assert redis_broker.redis.smembers(redis_broker.keys.queues) == {b"default"}
    # Every job landing in a share rings the bell for idle threads (64 tokens at most).
    assert redis_broker.redis.llen(redis_broker.keys.bell("default")) == 64


def test_no_share_given_means_the_tasks_own(redis_broker: RedisBroker) -> None:
    publish(redis_broker, "tx", ["x1"])
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:tx")) == ["x1"]


def test_the_claim_serves_shares_and_plain_jobs_in_turn(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    redis_broker.push([(job(f"p{n}"), None) for n in range(3)])
    publish(redis_broker, "ta", [f"a{n}" for n in range(5)], "tenant:acme")
    publish(redis_broker, "tb", [f"b{n}" for n in range(2)], "task:tb")
    order = claim_all(fetch)
    assert order == ["p0", "a0", "b0", "p1", "a1", "b1", "p2", "a2", "a3", "a4"]
    # The ring went with the last share's job; the queue is served as before.
    assert not redis_broker.redis.exists(redis_broker.keys.shares("default"))
    assert not redis_broker.redis.exists(redis_broker.keys.share("default", "tenant:acme"))
    # Claimed jobs sit in the in-flight list, registered, exactly as plain ones.
    inflight = redis_broker.keys.inflight("proc-1", "default")
    assert redis_broker.redis.llen(inflight) == 10
    assert redis_broker.redis.hget(redis_broker.keys.inflight_registry, inflight) == b"proc-1"


def test_a_batch_keeps_the_turns(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    publish(redis_broker, "ta", [f"a{n}" for n in range(6)], "task:ta")
    publish(redis_broker, "tb", [f"b{n}" for n in range(2)], "task:tb")
    redis_broker.push([(job("p0"), None)])
    # Batches of 3: the rotation goes on from one call to the next.
    assert claim_all(fetch, 3) == ["p0", "a0", "b0", "a1", "b1", "a2", "a3", "a4", "a5"]


def test_a_fifo_queue_keeps_push_order(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    redis_broker.redis.sadd(redis_broker.keys.fifo, "default")
    redis_broker.push([(job("p0"), None)])
    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    publish(redis_broker, "tb", ["b0"], "task:tb")
    redis_broker.push([(job("p1"), None)])
    assert not redis_broker.redis.exists(redis_broker.keys.shares("default"))
    assert claim_all(fetch) == ["p0", "a0", "a1", "b0", "p1"]


def test_a_ring_left_behind_by_a_switch_to_fifo_drains(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    redis_broker.redis.sadd(redis_broker.keys.fifo, "default")
    # Pushed after the switch: queue:default itself.
    publish(redis_broker, "tb", ["b0", "b1"], "task:tb")
    assert waiting(redis_broker, redis_broker.keys.queue("default")) == ["b0", "b1"]
    assert claim_all(fetch) == ["b0", "a0", "b1", "a1"]
    assert not redis_broker.redis.exists(redis_broker.keys.shares("default"))
    assert not redis_broker.redis.exists(redis_broker.keys.share("default", "task:ta"))


def test_a_worker_start_writes_its_queues_fair_setting(
    redis_broker: RedisBroker, redis_settings: Settings
) -> None:
    fifo = replace(
        redis_settings,
        queues=(QueueSpec("a", fair=False), QueueSpec("b"), QueueSpec("c")),
        fifo_queues=("c",),
    )
    redis_broker.redis.sadd(redis_broker.keys.fifo, "b")
    fetcher = RedisBroker(fifo, redis_broker.redis).fetcher("proc-2")
    fetcher.register()
    assert redis_broker.redis.smembers(redis_broker.keys.fifo) == {b"a", b"c"}
    # Once per start: a heartbeat's registration leaves another start's setting alone.
    redis_broker.redis.sadd(redis_broker.keys.fifo, "b")
    fetcher.register()
    assert redis_broker.redis.smembers(redis_broker.keys.fifo) == {b"a", b"b", b"c"}


def test_keyed_and_unique_jobs_of_a_task(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    # A unique job of a task waits in its share; a keyed one goes through its key's line,
    # then waits in queue:<queue> (the jobs outside any task take its turn).
    publish(redis_broker, "ta", ["u1"], "task:ta", unique_key="u", unique_for=30)
    staging = redis_broker.staging("tb", None, "task:tb")
    staging.write(staging.encode([job("k1", concurrency_key="k", concurrency_limit=1)]), cast(Any, None))
    staging.publish()
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:ta")) == ["u1"]
    assert waiting(redis_broker, redis_broker.keys.queue("default")) == ["k1"]
    assert claim_all(fetch) == ["k1", "u1"]


def fed_publish(broker: RedisBroker, task: str, jids_: list[str], feed: Feed) -> int:
    staging = broker.staging(task, feed, f"task:{task}")
    staging.write(staging.encode([job(j, task=task, feed=task) for j in jids_]), cast(Any, None))
    return staging.publish()


def test_feed_releases_wait_in_the_share(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    redis_broker.push([(job("p0"), None), (job("p1"), None)])
    fed_publish(redis_broker, "fa", ["a0", "a1", "a2", "a3"], Feed(parallel=2))
    assert redis_broker.redis.hget(redis_broker.keys.feed("fa"), "share") == b"task:fa"
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:fa")) == ["a0", "a1"]
    assert ring(redis_broker) == ["", "task:fa"]
    units = fetch.claim(4, [], [])
    assert jids([u.payload for u in units]) == ["p0", "a0", "p1", "a1"]
    # Their ends release the next ones into the share, which joins the ring again.
    acks = [u.decoded(payload.loads(u.payload)) for u in units if b"feed" in u.payload]
    assert jids([u.payload for u in fetch.claim(2, acks, [])]) == ["a2", "a3"]


def acked(unit: UnitOfWork) -> UnitOfWork:
    return unit.decoded(payload.loads(unit.payload))


def test_a_feed_alone_in_its_queue_hands_its_released_jobs_to_the_claim(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    fed_publish(redis_broker, "fa", ["a0", "a1", "a2"], Feed(parallel=1))
    [a0] = fetch.claim(1, [], [])
    redis_broker.redis.delete(redis_broker.keys.bell("default"))
    [a1] = fetch.claim(1, [acked(a0)], [])
    assert jids([a1.payload]) == ["a1"]
    # Straight to the claim: the share stays empty and no idle thread is woken for it.
    assert not redis_broker.redis.exists(redis_broker.keys.share("default", "task:fa"))
    assert not redis_broker.redis.exists(redis_broker.keys.bell("default"))


def test_a_claim_takes_a_feeds_waiting_jobs_before_those_its_ends_release(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    fed_publish(redis_broker, "fa", ["a0", "a1", "a2", "a3"], Feed(parallel=2))
    [a0] = fetch.claim(1, [], [])
    assert jids([u.payload for u in fetch.claim(2, [acked(a0)], [])]) == ["a1", "a2"]
    assert not redis_broker.redis.exists(redis_broker.keys.share("default", "task:fa"))


def test_a_claim_that_empties_every_share_clears_the_bell(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    assert redis_broker.redis.llen(redis_broker.keys.bell("default")) == 2
    assert claim_all(fetch, wanted=2) == ["a0", "a1"]
    # Its tokens would only send idle threads to claims that find nothing.
    assert not redis_broker.redis.exists(redis_broker.keys.bell("default"))


def test_a_feed_sharing_its_queue_releases_into_its_share_and_takes_turns(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    fed_publish(redis_broker, "fa", ["a0", "a1"], Feed(parallel=1))
    publish(redis_broker, "tb", ["b0", "b1"], "task:tb")
    first = fetch.claim(2, [], [])
    [a0] = [u for u in first if b'"a0"' in u.payload]
    # Another task waits: the release goes to the feed's share, and the ring's turn comes first.
    assert jids([u.payload for u in fetch.claim(1, [acked(a0)], [])]) == ["b1"]
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:fa")) == ["a1"]


def test_a_negative_priority_goes_ahead_of_the_turns(redis_broker: RedisBroker, fetch: ReliableFetch) -> None:
    redis_broker.push([(job("p0"), None), (job("p1"), None)])
    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    fed_publish(redis_broker, "fu", ["u0", "u1", "u2"], Feed(parallel=2, priority=-1))
    assert waiting(redis_broker, redis_broker.keys.urgent("default")) == ["u0", "u1"]
    assert claim_all(fetch) == ["u0", "u1", "p0", "a0", "p1", "a1"]


def test_a_priority_change_moves_released_jobs_between_share_and_urgent(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    redis_broker.push([(job("p0"), None)])
    fed_publish(redis_broker, "fa", ["a0", "a1", "a2"], Feed(parallel=3))
    assert redis_broker.feeds.update("fa", FeedChange(priority=-2)) is not None
    assert waiting(redis_broker, redis_broker.keys.urgent("default")) == ["a0", "a1", "a2"]
    # The share emptied: it left the ring.
    assert ring(redis_broker) == [""]
    assert redis_broker.feeds.update("fa", FeedChange(priority=0)) is not None
    assert not redis_broker.redis.exists(redis_broker.keys.urgent("default"))
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:fa")) == ["a0", "a1", "a2"]
    assert ring(redis_broker) == ["", "task:fa"]
    assert claim_all(fetch) == ["p0", "a0", "a1", "a2"]


def test_queue_size_stats_rows_and_delete_count_the_shares(
    redis_broker: RedisBroker, fetch: ReliableFetch, reader: RedisReader, redis_settings: Settings
) -> None:
    redis_broker.push([(job("p0"), None), (job("o0", queue="other"), None)])
    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    fed_publish(redis_broker, "fu", ["u0"], Feed(parallel=1, priority=-1))
    queue = Queue("default", settings=redis_settings)
    assert queue.size == 4
    assert Stats(settings=redis_settings).queues == {"default": 4, "other": 1}
    assert sorted(record.jid for record in queue) == ["a0", "a1", "p0", "u0"]
    found = queue.find_job("a1")
    assert found is not None
    found.delete()
    assert queue.size == 3
    # Deleting a share's last job takes the share out of the ring.
    assert reader.queue_delete("default", Stored(payload.dumps(job("a0")).encode())) is False
    [a0] = [row for row in reader.queue_rows("default", 10) if b'"a0"' in row.raw]
    assert reader.queue_delete("default", a0) is True
    assert ring(redis_broker) == [""]
    assert claim_all(fetch) == ["u0", "p0"]


def test_clear_empties_the_shares_the_urgent_list_and_the_ring(
    redis_broker: RedisBroker, fetch: ReliableFetch, redis_settings: Settings
) -> None:
    redis_broker.push([(job("p0"), None)])
    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    publish(redis_broker, "tb", ["b0"], "task:tb", unique_key="u", unique_for=30)
    fed_publish(redis_broker, "fu", ["u0", "u1"], Feed(parallel=1, priority=-1))
    assert Queue("default", settings=redis_settings).clear() == 5
    for key in (
        redis_broker.keys.queue("default"),
        redis_broker.keys.share("default", "task:ta"),
        redis_broker.keys.share("default", "task:tb"),
    ):
        assert not redis_broker.redis.exists(key), key
    # Cleared jobs ended: the unique key is free, the feed released its next job (kept: it
    # was not in the queue when it was cleared), which made a new ring.
    assert not redis_broker.redis.exists(redis_broker.keys.unique("u"))
    assert waiting(redis_broker, redis_broker.keys.urgent("default")) == ["u1"]
    assert ring(redis_broker) == [""]
    assert redis_broker.redis.llen(redis_broker.keys.bell("default")) == 1
    assert claim_all(fetch) == ["u1"]
    assert not redis_broker.redis.exists(redis_broker.keys.shares("default"))
    publish(redis_broker, "tc", ["c0"], "task:tc")
    assert Queue("default", settings=redis_settings).clear() == 1
    for key in (
        redis_broker.keys.shares("default"),
        redis_broker.keys.bell("default"),
        redis_broker.keys.share("default", "task:tc"),
    ):
        assert not redis_broker.redis.exists(key), key


def test_shutdown_and_give_back_return_share_jobs_to_the_queue(
    redis_broker: RedisBroker, fetch: ReliableFetch
) -> None:
    publish(redis_broker, "ta", ["a0", "a1", "a2"], "task:ta")
    units = fetch.claim(2, [], [])
    assert fetch.requeue(units[:1]) == 1
    assert fetch.requeue_all(forget=True) == 1
    # Back at the head of queue:default (the jobs outside any task), each taking its turn.
    assert waiting(redis_broker, redis_broker.keys.queue("default")) == ["a1", "a0"]
    assert ring(redis_broker) == ["", "task:ta"]
    assert claim_all(fetch) == ["a1", "a2", "a0"]


def blocked_in(broker: RedisBroker, *commands: str) -> list[dict[str, Any]]:
    """This process's connections of ``broker`` blocked in one of ``commands``."""
    name = broker.redis.connection_pool.connection_kwargs["client_name"]
    return [c for c in broker.redis.client_list() if c.get("name") == name and c.get("cmd") in commands]


def test_a_bell_wakes_an_idle_thread_and_a_plain_push_still_wakes_the_queue(
    redis_broker: RedisBroker, blocking_broker: RedisBroker
) -> None:
    fetcher = blocking_broker.fetcher("proc-3")
    fetcher.register()
    returned: dict[int, tuple[float, UnitOfWork | None]] = {}

    def block(target: int) -> None:
        unit = fetcher.wait(target)
        returned[target] = (time.monotonic(), unit)

    waiters = [threading.Thread(target=block, args=(target,)) for target in (0, 1)]
    for thread in waiters:
        thread.start()
    wait_until(lambda: len(blocked_in(blocking_broker, "blmove", "blpop")) >= 2)
    started = time.monotonic()
    publish(redis_broker, "ta", ["a0"], "task:ta")
    waiters[1].join(2)
    assert 1 in returned and returned[1][0] - started < 1.0
    # The bell wakes the thread; the job waits for its turn in the claim that follows.
    assert returned[1][1] is None
    started = time.monotonic()
    redis_broker.push([(job("p0"), None)])
    waiters[0].join(2)
    assert 0 in returned and returned[0][0] - started < 1.0
    unit = returned[0][1]
    assert unit is not None and jids([unit.payload]) == ["p0"]
    assert jids([u.payload for u in fetcher.claim(1, [], [])]) == ["a0"]

    # A stop unblocks a thread on a bell at once, as one in BLMOVE.
    waiter = threading.Thread(target=block, args=(1,))
    del returned[1]
    waiter.start()
    wait_until(lambda: blocked_in(blocking_broker, "blpop"))
    started = time.monotonic()
    fetcher.interrupt()
    waiter.join(2)
    assert 1 in returned and returned[1][0] - started < 1.0


@pytest.fixture
def workers(redis_settings: Settings, tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    runs_file = tmp_path / "runs.txt"
    sessions = Sessions()

    def start(concurrency: int) -> Any:
        env = worker_env(redis_settings, ASYNCTASK_TEST_RUNS=str(runs_file))
        return sessions.start(worker_argv(BROKER_JOBS, "-c", str(concurrency)), env, ROOT)

    yield runs_file, start
    sessions.kill()


def record_job(jid: str, seconds: float = 0.0) -> payload.JobDict:
    if seconds:
        return {"class": "record_slowly", "args": [seconds], "jid": jid, "queue": "default", "retry": True}
    return {"class": "record", "args": [0], "jid": jid, "queue": "default", "retry": True}


def publish_records(broker: RedisBroker, task: str, jobs: list[payload.JobDict]) -> None:
    staging = broker.staging(task, None, f"task:{task}")
    staging.write(staging.encode(jobs), cast(Any, None))
    staging.publish()


def done(runs_file: Path) -> dict[str, float]:
    return {run.jid: run.at for run in read_runs(runs_file) if run.event == "done"}


def test_an_idle_worker_starts_a_task_job_at_once(
    redis_broker: RedisBroker, workers: tuple[Path, Any]
) -> None:
    runs_file, start = workers
    # Two threads, one queue: one blocks on queue:default and one on its bell, each for the
    # whole fetch timeout (2 s), so a job the bell did not announce would wait up to that long.
    start(2)
    redis_broker.push([(record_job("warm-up"), None)])
    wait_until(lambda: done(runs_file).get("warm-up"), timeout=20)
    for n in range(3):
        time.sleep(0.3)
        at = time.time()
        publish_records(redis_broker, f"t{n}", [record_job(f"a{n}")])
        finished = wait_until(lambda n=n: done(runs_file).get(f"a{n}"), timeout=10)
        assert finished - at < 0.5
        time.sleep(0.3)
        at = time.time()
        redis_broker.push([(record_job(f"p{n}"), None)])
        finished = wait_until(lambda n=n: done(runs_file).get(f"p{n}"), timeout=10)
        assert finished - at < 0.5


def test_a_killed_worker_loses_no_share_job(
    redis_broker: RedisBroker, workers: tuple[Path, Any], redis_settings: Settings
) -> None:
    runs_file, start = workers
    publish_records(redis_broker, "ta", [record_job(f"a{n}", 0.2) for n in range(20)])
    publish_records(redis_broker, "tb", [record_job(f"b{n}", 0.2) for n in range(20)])
    redis_broker.push([(record_job(f"p{n}", 0.2), None) for n in range(10)])
    everything = {f"a{n}" for n in range(20)} | {f"b{n}" for n in range(20)} | {f"p{n}" for n in range(10)}
    doomed = start(5)
    wait_until(lambda: len(done(runs_file)) >= 8, timeout=20)
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    before = read_runs(runs_file)
    cut_short = {r.jid for r in before if r.event == "start"} - {r.jid for r in before if r.event == "done"}
    assert cut_short, "the kill found no job running: it tested nothing"
    # The first jobs came in turns: a, b and plain jobs alternate from the start.
    first = [r.jid[0] for r in sorted(before, key=lambda r: r.at) if r.event == "start"][:9]
    assert set(first) == {"a", "b", "p"}
    survivor = start(5)
    wait_until(lambda: set(done(runs_file)) == everything, timeout=60)
    queue = Queue("default", settings=redis_settings)
    wait_until(lambda: queue.size == 0)
    assert not redis_broker.redis.exists(redis_broker.keys.shares("default"))
    os.killpg(survivor.pid, signal.SIGTERM)
    assert survivor.wait(15) == 0


def test_stats_load_the_sizes_script_when_redis_lacks_it(
    redis_broker: RedisBroker, reader: RedisReader
) -> None:
    from asynctask.brokers.redis.scripts import script_source

    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    # A text Redis has never seen: its first EVALSHA fails with NOSCRIPT.
    reader._sizes = redis_broker.redis.register_script(
        script_source("sizes") + f"\n-- {redis_broker.keys.prefix}"
    )
    assert reader.stats("default").queues == {"default": 2}
    assert reader.stats("default").queues == {"default": 2}


def test_a_claim_takes_no_jobs_for_threads_blocked_in_redis(
    redis_broker: RedisBroker, blocking_broker: RedisBroker
) -> None:
    fetcher = blocking_broker.fetcher("proc-4")
    blocked = threading.Thread(target=fetcher.wait, args=(0,))
    blocked.start()
    wait_until(lambda: blocked_in(blocking_broker, "blmove"))
    publish(redis_broker, "ta", ["a0", "a1"], "task:ta")
    # Two threads in fetch, one of them blocked on queue:default: one job is claimed, the
    # other stays queued for whichever thread comes next.
    assert jids([u.payload for u in fetcher.claim(2, [], [])]) == ["a0"]
    assert waiting(redis_broker, redis_broker.keys.share("default", "task:ta")) == ["a1"]
    fetcher.interrupt()
    blocked.join(5)


def test_a_thread_leaving_the_queue_unwatched_wakes_one_on_the_bell(
    redis_broker: RedisBroker, blocking_broker: RedisBroker
) -> None:
    fetcher = blocking_broker.fetcher("proc-5")
    returned: dict[int, float] = {}

    def block(target: int) -> None:
        fetcher.wait(target)
        returned[target] = time.monotonic()

    waiters = [threading.Thread(target=block, args=(target,)) for target in (0, 1)]
    for thread in waiters:
        thread.start()
    wait_until(lambda: len(blocked_in(blocking_broker, "blmove", "blpop")) >= 2)
    started = time.monotonic()
    redis_broker.push([(job("p0"), None)])
    for thread in waiters:
        thread.join(2)
    # The bell's thread came back at once, to watch queue:default in its turn.
    assert returned[0] - started < 1.0 and returned[1] - started < 1.0
    assert not redis_broker.redis.exists(redis_broker.keys.bell("default"))

    # A lone idle thread does not sit out the whole fetch timeout on one of the two.
    started = time.monotonic()
    assert fetcher.wait(1) is None
    assert time.monotonic() - started < 1.0
