"""Returning the in-flight jobs of dead processes to their queues.

A process is dead when its Sidekiq process hash (``<identity>``, refreshed by every
heartbeat, 60 s TTL) has expired. Every live worker runs ``recover_orphans`` after its
heartbeat; a short lock lets one of them scan per interval. The check of the owner's hash
and the move happen inside one script, so a process that is alive keeps its jobs.
"""

from __future__ import annotations

import logging
from typing import cast

import redis

from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys

logger = logging.getLogger("asynctask.recovery")


def recover_orphans(
    conn: redis.Redis, keys: Keys, scripts: Scripts, identity: str, lock_seconds: float
) -> int:
    """Requeue the jobs of every registered in-flight list whose owner died; return how many."""
    if not conn.set(keys.recovery_lock, identity, nx=True, px=max(1, int(lock_seconds * 1000))):
        return 0
    registered = cast(dict[bytes, bytes], conn.hgetall(keys.inflight_registry))
    if not registered:
        return 0
    pipe = conn.pipeline(transaction=False)
    lists: list[tuple[str, str, str]] = []
    marker = f"{keys.prefix}asynctask:inflight|"
    for raw_key, raw_owner in registered.items():
        key, owner = raw_key.decode(), raw_owner.decode()
        owner_and_queue = key[len(marker) :].split("|", 1) if key.startswith(marker) else []
        if len(owner_and_queue) != 2:
            logger.error("ignoring malformed in-flight registry entry %r", key)
            continue
        queue = owner_and_queue[1]
        lists.append((key, owner, queue))
        scripts.requeue(
            keys=[key, keys.queue(queue), keys.inflight_registry, keys.process(owner), keys.queues],
            args=["orphans", queue, "forget"],
            client=pipe,
        )
    total = 0
    for (_key, owner, queue), moved in zip(lists, pipe.execute(), strict=True):
        if int(moved) > 0:
            total += int(moved)
            logger.warning(
                "recovered %d in-flight job(s) of dead process %s to queue %s", int(moved), owner, queue
            )
    return total


def requeue_process(conn: redis.Redis, keys: Keys, scripts: Scripts, identity: str) -> int:
    """Process ``identity`` is dead: move every job of its in-flight lists back to its queue
    and remove its process record, in one round trip; return how many jobs moved.

    Its lists stay registered and its process hash is deleted: a claim the process sent just
    before it died, and that Redis ran after this, lands in a list whose owner is plainly
    dead, which ``recover_orphans`` empties (and forgets) at its next look."""
    marker = keys.inflight(identity, "")
    owned = [
        key.decode()
        for key, owner in cast(dict[bytes, bytes], conn.hgetall(keys.inflight_registry)).items()
        if owner.decode() == identity and key.decode().startswith(marker)
    ]
    pipe = conn.pipeline(transaction=False)
    for key in owned:
        queue = key[len(marker) :]
        scripts.requeue(
            keys=[key, keys.queue(queue), keys.inflight_registry, keys.process(identity), keys.queues],
            args=["own", queue, "keep"],
            client=pipe,
        )
    pipe.srem(keys.processes, identity)
    pipe.unlink(keys.process(identity), keys.workers(identity), keys.work(identity), keys.signals(identity))
    return sum(int(moved) for moved in pipe.execute()[: len(owned)])
