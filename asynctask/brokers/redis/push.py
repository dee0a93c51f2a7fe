"""Writing jobs to queues and the schedule, in Sidekiq's format and command sequence; staging task jobs."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import redis

from asynctask import payload
from asynctask.brokers.base import Staging
from asynctask.brokers.redis.connection import PlainRoundTrips
from asynctask.brokers.redis.scripts import Scripts
from asynctask.feeds import FEED_FIELD, Feed
from asynctask.keys import Keys
from asynctask.tracking.outbox import pack
from asynctask.tracking.transitions import split_by_job

if TYPE_CHECKING:
    from sqlalchemy import Connection

logger = logging.getLogger("asynctask.client")

#: Seconds a staging list outlives its latest write: the backstop that removes the jobs of a
#: ``create_task`` that died before publishing them (no worker ever sees staged jobs).
STAGING_TTL = 3600


def is_flow(job: payload.JobDict) -> bool:
    """Whether ``job`` is pushed by the flow script: it has a concurrency or unique key, or
    belongs to a feed (which it rejoins if the feed still exists)."""
    return "concurrency_key" in job or "unique_key" in job or FEED_FIELD in job


def held_entry(job: payload.JobDict, encoded: str) -> str:
    """A job as a feed holds it: ``<length>:<jid><length>:<queue><payload>``, lengths in
    bytes, as a concurrency key's line holds it (releasing it decodes nothing)."""
    jid, queue = str(job["jid"]), str(job["queue"])
    return f"{len(jid.encode())}:{jid}{len(queue.encode())}:{queue}{encoded}"


Command = tuple[str | float, ...]


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """A script run by name (``Scripts`` attribute), queued on a pipeline among the commands."""

    name: Literal["record", "push"]
    keys: Sequence[str]
    args: Sequence[str | int | float]


# Not frozen: a frozen dataclass is built several times slower, and one is built per push.
@dataclass(slots=True)
class PushPlan:
    """What pushing some jobs sends, for a connection of either kind to run (``push_jobs``, or
    an asyncio client's pusher): ``plain`` commands alone (one write, no pipeline object), or
    pipelined ``steps``; either way, ``jids`` with the reply each flow job's holder is in."""

    jids: list[str]
    plain: list[Command] | None
    steps: list[Command | ScriptCall]
    #: Entry index -> the index of its push script's reply among the steps'.
    flow: dict[int, int]

    def holders(self, replies: Sequence[object]) -> list[str]:
        """The jids the store holds, given the pipelined steps' replies."""
        jids = list(self.jids)
        for index, reply in self.flow.items():
            holder = replies[reply]
            jids[index] = holder.decode() if isinstance(holder, bytes) else str(holder)
        return jids


def plan_push(
    keys: Keys,
    entries: payload.PushEntries,
    max_payload_bytes: int,
    *,
    transitions: Sequence[str] = (),
    atomic: bool = False,
) -> PushPlan:
    """Push jobs in one round trip: ``SADD queues`` + one ``LPUSH`` per queue, one ``ZADD``,
    and one ``push`` script call per job with a concurrency or unique key (through its key's
    line; not pushed at all if its unique key is held).

    Each job is scheduled or queued by ``payload.schedule`` (every queued job gets the same
    fresh ``enqueued_at``). Tracking ``transitions`` (encoded) are recorded first by the
    ``record`` script; those of a unique job by its push script, only if it is stored.
    ``atomic`` (the caller's MULTI/EXEC) needs the pipelined steps.
    """
    now = payload.now()
    plain = _PlainJobs(keys)
    jids = [str(job["jid"]) for job, _ in entries]
    if not atomic and not transitions and not any(is_flow(job) for job, _ in entries):
        if len(entries) == 1:
            # perform_async: no lists built for one job.
            [(job, at)] = entries
            plain.add(job, payload.schedule(job, at, now), payload.dumps_within(job, max_payload_bytes))
        else:
            dues = [payload.schedule(job, at, now) for job, at in entries]
            jobs = [job for job, _ in entries]
            for job, due, encoded in zip(
                jobs, dues, payload.dumps_many_within(jobs, max_payload_bytes), strict=True
            ):
                plain.add(job, due, encoded)
        return PushPlan(jids, [*plain.take_queued(), *plain.take_scheduled()], [], {})
    plan = PushPlan(jids, None, [], {})
    steps = plan.steps
    unique = {str(job["jid"]) for job, _ in entries if "unique_key" in job}
    transitions, own = split_by_job(transitions, unique)
    if transitions:
        steps.append(
            ScriptCall(
                "record", [keys.tracking_stream, keys.tracking_seq], [len(transitions), pack(transitions)]
            )
        )
    for index, (job, at) in enumerate(entries):
        due = payload.schedule(job, at, now)
        encoded = payload.dumps_within(job, max_payload_bytes)
        if not is_flow(job):
            plain.add(job, due, encoded)
            continue
        # Queued jobs pushed before this one are queued before it, as the caller ordered them.
        steps += plain.take_queued()
        when, delay = ("", 0.0) if due is None else (repr(due), due - now)
        mine = own.get(str(job["jid"]), [])
        plan.flow[index] = len(steps)
        steps.append(
            ScriptCall(
                "push", [], [keys.prefix, encoded, when, repr(delay), str(job["jid"]), len(mine), pack(mine)]
            )
        )
    steps += [*plain.take_queued(), *plain.take_scheduled()]
    return plan


def push_jobs(
    conn: redis.Redis,
    plain_round_trips: PlainRoundTrips,
    keys: Keys,
    scripts: Scripts,
    entries: payload.PushEntries,
    max_payload_bytes: int,
    *,
    transitions: Sequence[str] = (),
    atomic: bool = False,
) -> list[str]:
    """Push jobs as ``plan_push`` says, in one round trip; returns the jid the store holds for
    each entry: its own, or the unique key's holder. ``atomic`` wraps everything in
    MULTI/EXEC: all jobs or none."""
    plan = plan_push(keys, entries, max_payload_bytes, transitions=transitions, atomic=atomic)
    if plan.plain is not None:
        # Plain commands only: one round trip without redis-py's pipeline (a one-job push's
        # largest cost after the round trip itself).
        plain_round_trips.send(plan.plain)
        return plan.jids
    pipe = conn.pipeline(transaction=atomic)
    for step in plan.steps:
        if isinstance(step, ScriptCall):
            getattr(scripts, step.name)(keys=step.keys, args=step.args, client=pipe)
        else:
            pipe.execute_command(*step)  # type: ignore[no-untyped-call]
    return plan.holders(pipe.execute())


class _PlainJobs:
    """Encoded jobs that are only queued (grouped by queue) or scheduled, and the plain commands
    that push them: ``SADD queues`` and one ``LPUSH`` per queue, one ``ZADD``."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys
        self._queued: dict[str, list[str]] = {}
        self._scheduled: dict[str, float] = {}

    def add(self, job: payload.JobDict, due: float | None, encoded: str) -> None:
        if due is None:
            self._queued.setdefault(job["queue"], []).append(encoded)
        else:
            self._scheduled[encoded] = due

    def take_queued(self) -> list[Command]:
        keys = self._keys
        commands: list[Command] = []
        for queue, batch in self._queued.items():
            commands += (("SADD", keys.queues, queue), ("LPUSH", keys.queue(queue), *batch))
        self._queued.clear()
        return commands

    def take_scheduled(self) -> list[Command]:
        scheduled, self._scheduled = self._scheduled, {}
        if not scheduled:
            return []
        pairs = (item for member, due in scheduled.items() for item in (due, member))
        return [("ZADD", self._keys.schedule, *pairs)]


@dataclass(eq=False)
class StagingLists(Staging):
    """A task's jobs written batch by batch to private lists that no worker reads, then
    published by one script: all of them or none.

    ``encode`` (no I/O; it refuses a job over the size limit as ``push_jobs`` does), then
    ``write``, per batch; ``publish`` once at the end, or ``discard``. Every job gets the same
    ``enqueued_at``: the time its first batch was encoded.
    """

    conn: redis.Redis
    keys: Keys
    scripts: Scripts
    task_id: str
    max_payload_bytes: int
    #: The share the jobs wait in on a fair queue ("" for none: queue:<queue> itself).
    share: str = ""
    _enqueued_at: float | None = field(default=None, init=False)

    def _stamp(self, jobs: Sequence[payload.JobDict]) -> None:
        if self._enqueued_at is None:
            self._enqueued_at = payload.now()
        for job in jobs:
            job["enqueued_at"] = self._enqueued_at


@dataclass(eq=False)
class RedisStaging(StagingLists):
    """One task's jobs, staged in one list per queue (``Keys.staging``) and moved onto their
    queues, or on a fair queue into the task's share (``Keys.share``)."""

    #: Queue -> jobs its staging list holds (written and acknowledged).
    counts: dict[str, int] = field(default_factory=dict, init=False)
    #: Jobs the flow staging list holds (those with a concurrency or unique key).
    flow_count: int = field(default=0, init=False)
    _touched: set[str | None] = field(default_factory=set, init=False)

    def encode(self, jobs: Sequence[payload.JobDict]) -> dict[str | None, list[str]]:
        """The jobs' payloads by queue, in order, those with a concurrency or unique key under
        None (they are published one by one); raise ValueError for one over the size limit."""
        self._stamp(jobs)
        by_queue: dict[str | None, list[str]] = {}
        for job, encoded in zip(jobs, payload.dumps_many_within(jobs, self.max_payload_bytes), strict=True):
            by_queue.setdefault(None if is_flow(job) else job["queue"], []).append(encoded)
        return by_queue

    def _staging(self, queue: str | None) -> str:
        if queue is None:
            return self.keys.staging_flow(self.task_id)
        return self.keys.staging(self.task_id, queue)

    def write(self, by_queue: dict[str | None, list[str]], connection: Connection) -> None:
        """LPUSH a batch onto the staging lists (one round trip) and renew every list's expiry.

        The task's SQL ``connection`` plays no part: Redis publishes after the commit."""
        self._touched.update(by_queue)
        pipe = self.conn.pipeline(transaction=False)
        for queue, encoded in by_queue.items():
            pipe.lpush(self._staging(queue), *encoded)
        for queue in self._touched:
            pipe.expire(self._staging(queue), STAGING_TTL)
        pipe.execute()
        for queue, encoded in by_queue.items():
            if queue is None:
                self.flow_count += len(encoded)
            else:
                self.counts[queue] = self.counts.get(queue, 0) + len(encoded)

    def publish(self) -> int:
        """Move every staged job onto its queue, atomically; return how many moved.

        Jobs with a concurrency key go through their key's line; a job whose unique key is
        held (by another job or an earlier one of this task) is dropped, and not counted.
        Fails, moving nothing, if a staging list does not hold exactly what was written.
        """
        keys = [self.keys.queues, self.keys.staging_flow(self.task_id)]
        args: list[str | int] = [self.keys.prefix, self.flow_count]
        for queue, count in self.counts.items():
            keys += [self.keys.staging(self.task_id, queue), self.keys.queue(queue)]
            args += [queue, count]
        args.append(self.share)
        return int(self.scripts.publish(keys=keys, args=args))

    def discard(self) -> None:
        """Delete the staging lists, best effort (they expire by themselves otherwise)."""
        if not self._touched:
            return
        try:
            self.conn.delete(*(self._staging(queue) for queue in self._touched))
        except redis.RedisError as exc:
            logger.warning("task %s: could not delete its staged jobs (they expire): %s", self.task_id, exc)


@dataclass(eq=False)
class RedisFeedStaging(StagingLists):
    """A fed task's jobs, staged in one list in item order (``Keys.staging_feed``), which the
    publish script turns into the feed's held jobs while it creates the feed and releases the
    first of them: all in one step."""

    feed: Feed = field(kw_only=True)
    #: Jobs the staging list holds (written and acknowledged).
    count: int = field(default=0, init=False)
    _touched: bool = field(default=False, init=False)

    def encode(self, jobs: Sequence[payload.JobDict]) -> list[str]:
        """The jobs as held entries, in order; raise ValueError for one over the size limit."""
        self._stamp(jobs)
        return [held_entry(job, payload.dumps_within(job, self.max_payload_bytes)) for job in jobs]

    def write(self, encoded: list[str], connection: Connection) -> None:
        """RPUSH a batch onto the staging list and renew its expiry (one round trip)."""
        key = self.keys.staging_feed(self.task_id)
        pipe = self.conn.pipeline(transaction=False)
        pipe.rpush(key, *encoded)
        pipe.expire(key, STAGING_TTL)
        self._touched = True
        pipe.execute()
        self.count += len(encoded)

    def publish(self) -> int:
        """Hold every staged job in the new feed and release the first ones, atomically;
        return how many were published. Fails, changing nothing, if the staging list does
        not hold exactly what was written or the task already has a feed."""
        feed = self.feed
        return int(
            self.scripts.feed_publish(
                keys=[
                    self.keys.staging_feed(self.task_id),
                    self.keys.feed(self.task_id),
                    self.keys.feed_held(self.task_id),
                ],
                args=[
                    self.keys.prefix,
                    self.task_id,
                    self.count,
                    feed.parallel,
                    repr(float(feed.interval)),
                    feed.priority,
                    "1" if feed.paused else "0",
                    self.share,
                ],
            )
        )

    def discard(self) -> None:
        """Delete the staging list, best effort (it expires by itself otherwise)."""
        if not self._touched:
            return
        try:
            self.conn.delete(self.keys.staging_feed(self.task_id))
        except redis.RedisError as exc:
            logger.warning("task %s: could not delete its staged jobs (they expire): %s", self.task_id, exc)
