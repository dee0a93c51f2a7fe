"""RedisBroker: the broker interface on Sidekiq's keys and payloads, plus reliable fetch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import redis

from asynctask import fairness, payload
from asynctask.brokers.base import Beat, BeatReply, Broker, DueSet
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.redis import process
from asynctask.brokers.redis.checkpoints import RedisCheckpoints
from asynctask.brokers.redis.connection import connect, round_trips
from asynctask.brokers.redis.feeds import RedisFeeds
from asynctask.brokers.redis.fetch import ReliableFetch, release
from asynctask.brokers.redis.periodic import RedisPeriodic
from asynctask.brokers.redis.push import RedisFeedStaging, RedisStaging, push_jobs
from asynctask.brokers.redis.recovery import recover_orphans, requeue_process
from asynctask.brokers.redis.scripts import Scripts
from asynctask.brokers.redis.tracking import RedisTrackingStore
from asynctask.fairness import share_of
from asynctask.feeds import Feed
from asynctask.keys import Keys
from asynctask.settings import Settings
from asynctask.tracking.outbox import Outbox, draining

#: Due jobs moved per round trip by the scheduled/retry poller.
DUE_BATCH = 100


class RedisBroker(Broker):
    errors = (redis.RedisError, OSError)
    loses_data_on_restart = True
    backend = "redis"

    def __init__(self, settings: Settings, connection: redis.Redis | None = None) -> None:
        self.settings = settings
        self.keys = Keys(settings.namespace)
        self._owns_connection = connection is None
        self.redis = (
            connection
            if connection is not None
            else connect(
                settings.broker,
                max_connections=settings.concurrency + 8,
                longest_block=settings.fetch_timeout,
                replicas=settings.redis_min_replicas,
            )
        )
        self.scripts = Scripts(self.redis)
        self.plain_round_trips = round_trips(self.redis)
        self.tracking = RedisTrackingStore(self.redis, self.keys, self.scripts, settings)
        self.feeds = RedisFeeds(self.redis, self.keys, self.scripts)
        self.periodic = RedisPeriodic(self.redis, self.keys, self.scripts)
        self.checkpoints = RedisCheckpoints(self.redis, self.keys)

    def close(self) -> None:
        """Close the connection pool, if this broker opened it, and the push connections."""
        self.plain_round_trips.close()
        if self._owns_connection:
            self.redis.close()

    def ping(self) -> None:
        self.redis.ping()

    def server_time(self) -> float:
        seconds, microseconds = self.redis.time()
        return seconds + microseconds / 1_000_000

    def push(
        self,
        entries: payload.PushEntries,
        *,
        transitions: Sequence[str] = (),
        atomic: bool = False,
    ) -> list[str]:
        """Push jobs (and record their tracking ``transitions`` first) in one round trip;
        return the jid the store holds for each (the holder's for a taken unique key).

        ``atomic``: all jobs or none (MULTI/EXEC), for ``create_task``.
        """
        return push_jobs(
            self.redis,
            self.plain_round_trips,
            self.keys,
            self.scripts,
            entries,
            self.settings.max_payload_bytes,
            transitions=transitions,
            atomic=atomic,
        )

    def staging(
        self, task_id: str, feed: Feed | None = None, share: str | None = None
    ) -> RedisStaging | RedisFeedStaging:
        """Where ``create_task`` writes a task's jobs, invisible to workers, before publishing
        them: onto their queues (on a fair queue, into ``share``'s list), or, with a ``feed``,
        into the feed that releases them."""
        limit = self.settings.max_payload_bytes
        if share is None:
            share = share_of(task_id, None)
        if feed is not None:
            return RedisFeedStaging(self.redis, self.keys, self.scripts, task_id, limit, share, feed=feed)
        return RedisStaging(self.redis, self.keys, self.scripts, task_id, limit, share)

    def jobs_ahead(self, queue: str, share: str, waiting: int, earlier: int) -> int | None:
        keys = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.llen(keys.queue(queue))
        pipe.llen(keys.urgent(queue))
        pipe.llen(keys.shares(queue))
        pipe.lpos(keys.shares(queue), share)
        pipe.lpos(keys.shares(queue), "")
        plain, urgent, ring, position, plain_position = pipe.execute()
        if position is None:
            # Not taking turns: its jobs wait in the queue itself (a FIFO queue), in push order.
            return max(0, int(urgent) + int(plain) - waiting) if plain > 0 else None
        # The claim rotates the ring from its right end: the members right of the share come
        # first. The member "" stands for the queue's plain jobs, a share only while some wait.
        before = ring - 1 - position
        if plain == 0:
            ring -= 1
            before -= 1 if plain_position is not None and plain_position > position else 0
        return int(urgent) + fairness.jobs_ahead(earlier=earlier, shares=ring, before_in_round=before)

    def fetcher(self, identity: str, outbox: Outbox | None = None) -> ReliableFetch:
        s = self.settings
        return ReliableFetch(
            self.redis,
            self.keys,
            identity,
            s.served_queues,
            self.scripts,
            concurrency=s.concurrency,
            timeout=s.fetch_timeout,
            outbox=outbox,
        )

    def retry_at(
        self, unit: UnitOfWork, job: payload.JobDict, at: float, outbox: Outbox | None = None
    ) -> None:
        """Put a failed job in the retry set and release it from in-flight, atomically.

        The ``outbox``'s transitions (the job's ``error`` and "waiting for retry") are written
        in the same transaction, so they are in the stream before any process can retry it.
        """
        with draining(outbox) as transitions:
            pipe = self.redis.pipeline(transaction=True)
            if transitions:
                self.scripts.record_transitions(self.keys, pipe, transitions)
            pipe.zadd(self.keys.retry, {payload.dumps_storable(job): at})
            release(pipe, self.scripts, self.keys, [unit], "retry")
            pipe.execute()

    def kill(self, unit: UnitOfWork | None, encoded: str) -> None:
        """Add a job to the dead set (trimmed by age and count, as Sidekiq does) and release it.

        A dead job ends: its concurrency slot and unique key are freed, those of the claimed
        payload (``unit``) or, for a job buried from elsewhere, of ``encoded``."""
        self._bury(unit, encoded, encoded)

    def kill_unparseable(
        self, unit: UnitOfWork | None, raw: bytes, queue: str, reason: str, jid: str | None = None
    ) -> None:
        """As the base class, and the buried bytes end: a schedule or retry entry the poller
        buries (say, because the client middleware raised on it) may hold a slot or a unique key."""
        self._bury(unit, payload.dumps_storable(payload.unparseable(raw, queue, reason, jid)), raw)

    def _bury(self, unit: UnitOfWork | None, encoded: str, ended: str | bytes) -> None:
        now = payload.now()
        s = self.settings
        pipe = self.redis.pipeline(transaction=True)
        pipe.zadd(self.keys.dead, {encoded: now})
        pipe.zremrangebyscore(self.keys.dead, "-inf", now - s.dead_timeout)
        pipe.zremrangebyrank(self.keys.dead, 0, -(s.dead_max_jobs + 1))
        if unit is not None:
            release(pipe, self.scripts, self.keys, [unit])
        else:
            self.scripts.finish(
                keys=[self.keys.dead], args=[self.keys.prefix, "none", "end", ended], client=pipe
            )
        pipe.execute()

    def park(self, unit: UnitOfWork, encoded: str, outbox: Outbox | None = None) -> None:
        with draining(outbox) as transitions:
            pipe = self.redis.pipeline(transaction=True)
            if transitions:
                self.scripts.record_transitions(self.keys, pipe, transitions)
            pipe.zadd(self.keys.stopped, {encoded: payload.now()})
            release(pipe, self.scripts, self.keys, [unit])
            pipe.execute()

    def release(self, unit: UnitOfWork) -> None:
        """Drop a job from in-flight without keeping it anywhere (done, skipped or discarded):
        it ends, freeing its concurrency slot and unique key."""
        release(self.redis, self.scripts, self.keys, [unit])

    def enqueue_due(self, due_set: DueSet, rewrite: Callable[[bytes], payload.JobDict | None]) -> int:
        """Move every due member of ``schedule`` or ``retry`` to its queue; return how many.

        ``rewrite`` turns a stored member into the job to push, or None to drop the member
        (the poller buries what it cannot decode before returning None).
        """
        sorted_set = self.keys.retry if due_set == "retry" else self.keys.schedule
        total = 0
        while True:
            now = self.clock.now()
            members = cast(
                list[bytes], self.redis.zrangebyscore(sorted_set, "-inf", now, start=0, num=DUE_BATCH)
            )
            if not members:
                return total
            queue_keys: list[str] = []
            pairs: list[str | bytes] = []
            queue_names: list[str] = []
            for member in members:
                job = rewrite(member)
                encoded = None if job is None else self.due_payload(member, job, now)
                if job is None or encoded is None:
                    queue, encoded = "default", ""
                else:
                    queue = job["queue"]
                queue_keys.append(self.keys.queue(queue))
                pairs += (member, encoded)
                queue_names.append(queue)
            total += int(
                self.scripts.enqueue_due(
                    keys=[sorted_set, self.keys.queues, *queue_keys],
                    args=[*pairs, *queue_names, self.keys.prefix],
                )
            )
            if len(members) < DUE_BATCH:
                return total

    def recover_orphans(self, identity: str) -> int:
        return recover_orphans(
            self.redis, self.keys, self.scripts, identity, lock_seconds=self.settings.heartbeat_interval
        )

    def requeue_process(self, identity: str) -> int:
        return requeue_process(self.redis, self.keys, self.scripts, identity)

    def process_count(self) -> int:
        return int(self.redis.scard(self.keys.processes))

    def beat(self, beat: Beat) -> BeatReply:
        return process.write_beat(self.redis, self.keys, beat, self.settings.process_ttl)

    def clear_process(self, identity: str, processed: int, failed: int) -> None:
        process.clear(self.redis, self.keys, identity, processed, failed, self.settings.process_ttl)
