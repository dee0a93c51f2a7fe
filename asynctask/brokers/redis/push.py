"""Writing jobs to queues and the schedule, in Sidekiq's format and command sequence."""

from __future__ import annotations

from collections.abc import Sequence

import redis

from asynctask import payload
from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys


def push_jobs(
    conn: redis.Redis,
    keys: Keys,
    entries: Sequence[tuple[payload.JobDict, float | None]],
    max_payload_bytes: int,
    *,
    transitions: Sequence[str] = (),
    scripts: Scripts | None = None,
    atomic: bool = False,
) -> None:
    """Push jobs in one pipelined round trip: ``SADD queues`` + one ``LPUSH`` per queue, one ``ZADD``.

    An entry whose run-at time is in the future goes to ``schedule`` without ``enqueued_at``
    (as Sidekiq >= 7.1.2 writes it); every other job gets the same fresh ``enqueued_at``.
    Tracking ``transitions`` (encoded) are recorded first, in the same pipeline, by the
    ``record`` script of ``scripts``. ``atomic`` wraps everything in MULTI/EXEC: all jobs or none.
    """
    now = payload.now()
    by_queue: dict[str, list[str]] = {}
    scheduled: dict[str, float] = {}
    for job, at in entries:
        if at is not None and at > now:
            job.pop("enqueued_at", None)
            scheduled[_encoded(job, max_payload_bytes)] = at
        else:
            job["enqueued_at"] = now
            by_queue.setdefault(job["queue"], []).append(_encoded(job, max_payload_bytes))
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


def _encoded(job: payload.JobDict, limit: int) -> str:
    encoded = payload.dumps(job)
    # Characters bound the UTF-8 size from below; encode only when it might matter.
    if len(encoded) * 4 > limit and len(encoded.encode()) > limit:
        raise ValueError(
            f"job {job.get('class')} is {len(encoded.encode())} bytes, over the {limit}-byte limit "
            "(max_payload_bytes); pass references to data, not the data"
        )
    return encoded
