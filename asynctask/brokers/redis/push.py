"""Writing jobs to queues and the schedule, in Sidekiq's format and command sequence; staging task jobs."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis

from asynctask import payload
from asynctask.brokers.base import Staging
from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys

if TYPE_CHECKING:
    from sqlalchemy import Connection

logger = logging.getLogger("asynctask.client")

#: Seconds a staging list outlives its latest write: the backstop that removes the jobs of a
#: ``create_task`` that died before publishing them (no worker ever sees staged jobs).
STAGING_TTL = 3600


def push_jobs(
    conn: redis.Redis,
    keys: Keys,
    entries: Sequence[tuple[payload.JobDict, float | None]],
    max_payload_bytes: int,
    *,
    transitions: Sequence[str] = (),
    scripts: Scripts | None = None,
    atomic: bool = False,
) -> list[str]:
    """Push jobs in one pipelined round trip: ``SADD queues`` + one ``LPUSH`` per queue, one ``ZADD``.

    Each job is scheduled or queued by ``payload.schedule`` (every queued job gets the same
    fresh ``enqueued_at``). Tracking ``transitions`` (encoded) are recorded first, in the same
    pipeline, by the ``record`` script of ``scripts``. ``atomic`` wraps everything in
    MULTI/EXEC: all jobs or none. Returns the jobs' jids, in order.
    """
    now = payload.now()
    by_queue: dict[str, list[str]] = {}
    scheduled: dict[str, float] = {}
    for job, at in entries:
        due = payload.schedule(job, at, now)
        if due is not None:
            scheduled[payload.dumps_within(job, max_payload_bytes)] = due
        else:
            by_queue.setdefault(job["queue"], []).append(payload.dumps_within(job, max_payload_bytes))
    pipe = conn.pipeline(transaction=atomic)
    if transitions:
        if scripts is None:
            raise ValueError("recording transitions needs the broker's scripts")
        scripts.record_transitions(keys, pipe, transitions)
    for queue, encoded in by_queue.items():
        pipe.sadd(keys.queues, queue)
        pipe.lpush(keys.queue(queue), *encoded)
    if scheduled:
        pipe.zadd(keys.schedule, scheduled)
    pipe.execute()
    return [str(job["jid"]) for job, _ in entries]


class RedisStaging(Staging):
    """One task's jobs, written batch by batch to private lists that no worker reads (one per
    queue, ``Keys.staging``), then moved onto their queues by one script: all of them or none.

    ``encode`` (no I/O; it refuses a job over the size limit as ``push_jobs`` does), then
    ``write``, per batch; ``publish`` once at the end, or ``discard``. Every job gets the same
    ``enqueued_at``: the time its first batch was encoded.
    """

    def __init__(
        self, conn: redis.Redis, keys: Keys, scripts: Scripts, task_id: str, max_payload_bytes: int
    ) -> None:
        self.conn = conn
        self.keys = keys
        self.scripts = scripts
        self.task_id = task_id
        self.max_payload_bytes = max_payload_bytes
        #: Queue -> jobs its staging list holds (written and acknowledged).
        self.counts: dict[str, int] = {}
        self._touched: set[str] = set()
        self._enqueued_at: float | None = None

    def encode(self, jobs: Sequence[payload.JobDict]) -> dict[str, list[str]]:
        """The jobs' payloads by queue, in order; raise ValueError for one over the size limit."""
        if self._enqueued_at is None:
            self._enqueued_at = payload.now()
        by_queue: dict[str, list[str]] = {}
        for job in jobs:
            job["enqueued_at"] = self._enqueued_at
            by_queue.setdefault(job["queue"], []).append(payload.dumps_within(job, self.max_payload_bytes))
        return by_queue

    def write(self, by_queue: dict[str, list[str]], connection: Connection) -> None:
        """LPUSH a batch onto the staging lists (one round trip) and renew every list's expiry.

        The task's SQL ``connection`` plays no part: Redis publishes after the commit."""
        self._touched.update(by_queue)
        pipe = self.conn.pipeline(transaction=False)
        for queue, encoded in by_queue.items():
            pipe.lpush(self.keys.staging(self.task_id, queue), *encoded)
        for queue in self._touched:
            pipe.expire(self.keys.staging(self.task_id, queue), STAGING_TTL)
        pipe.execute()
        for queue, encoded in by_queue.items():
            self.counts[queue] = self.counts.get(queue, 0) + len(encoded)

    def publish(self) -> int:
        """Move every staged job onto its queue, atomically; return how many moved.

        Fails, moving nothing, if a staging list does not hold exactly what was written.
        """
        keys = [self.keys.queues]
        args: list[str | int] = []
        for queue, count in self.counts.items():
            keys += [self.keys.staging(self.task_id, queue), self.keys.queue(queue)]
            args += [queue, count]
        return int(self.scripts.publish(keys=keys, args=args))

    def discard(self) -> None:
        """Delete the staging lists, best effort (they expire by themselves otherwise)."""
        if not self._touched:
            return
        try:
            self.conn.delete(*(self.keys.staging(self.task_id, queue) for queue in self._touched))
        except redis.RedisError as exc:
            logger.warning("task %s: could not delete its staged jobs (they expire): %s", self.task_id, exc)
