"""Writing jobs to queues and the schedule, in Sidekiq's format and command sequence."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from asynctask import payload
from asynctask.keys import Keys


def push_jobs(conn: redis.Redis, keys: Keys, entries: Sequence[tuple[payload.JobDict, float | None]]) -> None:
    """Push jobs in one pipelined round trip: ``SADD queues`` + one ``LPUSH`` per queue, one ``ZADD``.

    An entry whose run-at time is in the future goes to ``schedule`` without ``enqueued_at``
    (as Sidekiq >= 7.1.2 writes it); every other job gets the same fresh ``enqueued_at``.
    """
    now = payload.now()
    by_queue: dict[str, list[str]] = {}
    scheduled: dict[str, float] = {}
    for job, at in entries:
        if at is not None and at > now:
            job.pop("enqueued_at", None)
            scheduled[payload.dumps(job)] = at
        else:
            job["enqueued_at"] = now
            by_queue.setdefault(job["queue"], []).append(payload.dumps(job))
    pipe = conn.pipeline(transaction=False)
    for queue, encoded in by_queue.items():
        pipe.sadd(keys.queues, queue)
        pipe.lpush(keys.queue(queue), *encoded)
    if scheduled:
        pipe.zadd(keys.schedule, scheduled)
    pipe.execute()
