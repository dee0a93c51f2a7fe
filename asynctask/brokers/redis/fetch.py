"""Reliable fetch: each claimed job sits in a private in-flight list until it is finished.

Sidekiq OSS pops a job with BRPOP, so a crash loses it. Here a job is moved atomically from
``queue:<name>`` into ``asynctask:inflight|<identity>|<name>`` and removed from there only
after it succeeded, was moved to the retry or dead set, or was pushed back at shutdown. The
in-flight lists are registered in the ``asynctask:inflight`` hash with their owner, so that a
live process returns a dead owner's jobs to their queues (see ``recovery``).

Round trips are shared by the process's threads. One script call acknowledges every job
finished since the last call and claims as many jobs as threads are waiting for one, into
a buffer the threads take from. Claimed jobs are in the in-flight list all along, so a
crash loses none. When every queue is empty a thread blocks with BLMOVE on one queue
(threads spread over the queues, rotating), so a new job starts at once instead of
waiting for a poll.

The same call writes the tracking outbox (transitions of tracked jobs, see
``asynctask.tracking.outbox``) and reads the cancellation generation, so that tracking adds
no round trip of its own to a busy worker.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis
from redis.client import Pipeline

from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys
from asynctask.settings import QueueSpec
from asynctask.tracking.outbox import Outbox, pack

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
        scripts: Scripts,
        *,
        concurrency: int,
        timeout: float,
        outbox: Outbox | None = None,
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
        self._scripts = scripts
        self._lock = threading.Lock()
        self._buffer: deque[UnitOfWork] = deque()
        self._acks: list[UnitOfWork] = []
        #: Threads inside ``fetch`` without a job yet: how many jobs one claim should take.
        self._waiting = 0
        self.outbox = outbox if outbox is not None else Outbox()
        self._script_keys = [keys.tracking_stream, keys.tracking_seq, keys.cancel_generation]
        #: The cancellation generation Redis had at the last claim: it changes whenever a task
        #: is cancelled, and a job claimed after that sees the new value.
        self.cancel_generation = b"0"

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
        """Queue ``ack`` (a finished job) for acknowledgement and return the next job, or None.

        ``block_on`` picks which queue this call blocks on when all are empty (threads pass
        different values so that every queue has a blocked reader).
        """
        with self._lock:
            if ack is not None:
                self._acks.append(ack)
            if self._buffer:
                return self._buffer.popleft()
            self._waiting += 1
            wanted = self._waiting
            acks, self._acks = self._acks, []
        try:
            return self._claim(wanted, acks) or self._block(block_on)
        except BaseException:
            with self._lock:
                self._acks[:0] = acks
            raise
        finally:
            with self._lock:
                self._waiting -= 1

    def _claim(self, wanted: int, acks: list[UnitOfWork]) -> UnitOfWork | None:
        order = self.queue_order()
        keys = self._script_keys[:]
        first_queue = len(keys) + 1
        position: dict[str, int] = {}
        for name in order:
            position[self._inflight_keys[name]] = len(keys) + 2
            keys += (self._queue_keys[name], self._inflight_keys[name])
        with self.outbox.draining(acknowledging=bool(acks)) as transitions:
            args: list[str | bytes | int] = [wanted, len(transitions), pack(transitions), len(acks)]
            for unit in acks:
                args += (position[unit.inflight_key], unit.payload)
            found = self._scripts.fetch(keys=keys, args=args)
        self.cancel_generation = found[0]
        # Lua index i (1-based) is a queue key; its in-flight list is KEYS[i + 1], keys[i] here.
        units = [
            UnitOfWork(order[(int(index) - first_queue) // 2], job, keys[int(index)])
            for index, job in zip(found[1::2], found[2::2], strict=True)
        ]
        if not units:
            return None
        if len(units) > 1:
            with self._lock:
                self._buffer.extend(units[1:])
        return units[0]

    def _block(self, block_on: int) -> UnitOfWork | None:
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
        self.cancel_generation = cast(bytes, self.redis.get(self.keys.cancel_generation) or b"0")
        # The connection does not decode responses, so the payload arrives as bytes.
        return UnitOfWork(name, cast(bytes, job), self._inflight_keys[name])

    def acknowledge(self, unit: UnitOfWork) -> None:
        """Acknowledge ``unit`` and any others waiting, now."""
        with self._lock:
            self._acks.append(unit)
        self.flush_acks()

    def flush_acks(self) -> None:
        """Acknowledge every finished job now (before a shutdown requeues what is left)."""
        with self._lock:
            acks, self._acks = self._acks, []
        with self.outbox.draining(acknowledging=bool(acks)) as transitions:
            if not acks and not transitions:
                return
            pipe = self.redis.pipeline(transaction=True)
            if transitions:
                self._scripts.record_transitions(self.keys, pipe, transitions)
            for unit in acks:
                release(pipe, unit)
            pipe.execute()

    def requeue_buffered(self) -> int:
        """Give back the claimed jobs no thread has started (the process is going quiet)."""
        with self._lock:
            units = list(self._buffer)
            self._buffer.clear()
        return self.requeue(units)

    def requeue(self, units: Sequence[UnitOfWork]) -> int:
        """Give claimed jobs back to the tail of their queues (fetched next), atomically."""
        if units:
            pipe = self.redis.pipeline(transaction=True)
            for unit in units:
                pipe.rpush(self._queue_keys[unit.queue], unit.payload)
                release(pipe, unit)
            pipe.execute()
        return len(units)

    def requeue_all(self, *, forget: bool) -> int:
        """Push every job this process holds back to its queue (shutdown). Returns how many.

        Finished jobs must be acknowledged first (``flush_acks``), or they would run again.
        ``forget`` also unregisters the lists: the process is leaving for good.
        """
        with self._lock:
            self._buffer.clear()
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
