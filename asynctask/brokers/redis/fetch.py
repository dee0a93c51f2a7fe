"""Reliable fetch: each claimed job sits in a private in-flight list until it is finished.

Sidekiq OSS pops a job with BRPOP, so a crash loses it. Here a job is moved atomically from
``queue:<name>`` into ``asynctask:inflight|<identity>|<name>`` and removed from there only
when it succeeded, was moved to the retry or dead set, or was pushed back at shutdown. The
in-flight lists are registered in the ``asynctask:inflight`` hash with their owner, so that a
live process returns a dead owner's jobs to their queues (see ``recovery``).

One round trip per job in steady state: the fetch script also acknowledges the previous
job. When every queue is empty a thread blocks with BLMOVE on one queue (threads spread over
the queues, rotating), so a new job starts at once instead of waiting for a poll.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis
from redis.client import Pipeline

from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys
from asynctask.settings import QueueSpec

#: Seconds a thread blocks on one queue when there are more queues than threads, so that
#: a queue without a blocked thread is still checked this often.
SHORT_BLOCK = 0.25


def release(conn: redis.Redis | Pipeline, unit: UnitOfWork) -> None:
    """Remove ``unit`` from its in-flight list (queue the command, on a pipeline)."""
    # The exact fetched bytes, which may not be valid UTF-8; redis-py's stubs say str only.
    conn.lrem(unit.inflight_key, -1, unit.payload)  # type: ignore[arg-type]


@dataclass(slots=True, frozen=True)
class UnitOfWork:
    """A claimed job: its queue, its bytes exactly as stored, and the list holding it."""

    queue: str
    payload: bytes
    inflight_key: str


class ReliableFetch:
    def __init__(
        self,
        conn: redis.Redis,
        keys: Keys,
        identity: str,
        queues: Sequence[QueueSpec],
        *,
        concurrency: int,
        timeout: float,
    ) -> None:
        self.redis = conn
        self.keys = keys
        self.identity = identity
        self.strict = all(q.weight == 0 for q in queues)
        # Sidekiq's weighting: a queue appears max(weight, 1) times; shuffle, then keep first sightings.
        self._weighted = [q.name for q in queues for _ in range(max(q.weight, 1))]
        self.queue_names = list(dict.fromkeys(q.name for q in queues))
        self._queue_keys = {name: keys.queue(name) for name in self.queue_names}
        self._inflight_keys = {name: keys.inflight(identity, name) for name in self.queue_names}
        self._block_timeout = timeout if len(self.queue_names) <= concurrency else min(timeout, SHORT_BLOCK)
        self._scripts = Scripts(conn)

    def register(self) -> None:
        """Record this process's in-flight lists so that others can recover them if it dies."""
        self.redis.hset(
            self.keys.inflight_registry, mapping={key: self.identity for key in self._inflight_keys.values()}
        )

    def queue_order(self) -> list[str]:
        if self.strict:
            return self.queue_names
        shuffled = self._weighted[:]
        random.shuffle(shuffled)
        return list(dict.fromkeys(shuffled))

    def fetch(self, ack: UnitOfWork | None, block_on: int) -> UnitOfWork | None:
        """Acknowledge ``ack`` (if given) and claim the next job; block briefly when idle.

        ``block_on`` picks which queue this call blocks on when all are empty (threads pass
        different values so that every queue has a blocked reader).
        """
        order = self.queue_order()
        keys = [ack.inflight_key if ack else self._inflight_keys[order[0]]]
        for name in order:
            keys += (self._queue_keys[name], self._inflight_keys[name])
        found = self._scripts.fetch(keys=keys, args=[ack.payload if ack else ""])
        if found:
            index, job = found
            # Lua index i (1-based) is the queue key; its in-flight list is KEYS[i + 1], keys[i] here.
            return UnitOfWork(order[(int(index) - 2) // 2], job, keys[int(index)])
        name = self.queue_names[block_on % len(self.queue_names)]
        # Redis takes fractional seconds; redis-py's stubs say int.
        job = self.redis.blmove(
            self._queue_keys[name],
            self._inflight_keys[name],
            self._block_timeout,  # type: ignore[arg-type]
            "RIGHT",
            "LEFT",
        )
        if job is None:
            return None
        # The connection does not decode responses, so the payload arrives as bytes.
        return UnitOfWork(name, cast(bytes, job), self._inflight_keys[name])

    def acknowledge(self, unit: UnitOfWork) -> None:
        release(self.redis, unit)

    def requeue_all(self, *, forget: bool) -> int:
        """Push every job this process holds back to its queue (shutdown). Returns how many.

        ``forget`` also unregisters the lists: the process is leaving for good.
        """
        moved = 0
        for name in self.queue_names:
            moved += int(
                self._scripts.requeue(
                    keys=[
                        self._inflight_keys[name],
                        self._queue_keys[name],
                        self.keys.inflight_registry,
                        self.keys.process(self.identity),
                        self.keys.queues,
                    ],
                    args=["own", name, "forget" if forget else "keep"],
                )
            )
        return moved
