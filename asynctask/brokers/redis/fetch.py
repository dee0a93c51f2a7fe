"""Reliable fetch: each claimed job sits in a private in-flight list until it is finished.

Sidekiq OSS pops a job with BRPOP, so a crash loses it. Here a job is moved atomically from
``queue:<name>`` into ``asynctask:inflight|<identity>|<name>`` and removed from there only
after it succeeded, was moved to the retry or dead set, or was pushed back at shutdown. The
in-flight lists are registered in the ``asynctask:inflight`` hash with their owner, so that a
live process returns a dead owner's jobs to their queues (see ``recovery``). A list is
registered again whenever a job enters it and at every heartbeat: a process that only
looked dead (its record expired in an outage or a stall) has its lists unregistered by the
recovery that emptied them, and must not go on claiming into lists nobody would recover.

Round trips are shared by the process's threads. One script call acknowledges every job
finished since the last call and claims as many jobs as threads are waiting for one (a batch
while jobs are scarce, see ``pacing``), into a buffer the threads take from. A fed task's jobs
that its acknowledgements release may be taken by the same call
(docs/internals/feeds-redis.md). Claimed jobs are in the in-flight list all along, so a crash
loses none. When every queue is empty a thread blocks with BLMOVE on one queue
(threads spread over the queues, rotating), so a new job starts at once instead of
waiting for a poll; on a fair queue some threads block on its bell instead, rung by the
jobs that land in its shares (docs/internals/fair-share-redis.md).

A paused queue (``asynctask:paused``) is skipped by the claim script, which reads the set
itself, so a pause costs a busy worker no round trip. The script also says which of this
process's queues are paused, and idle threads block on none of them (nor on their bells).
A thread may still be blocked on a queue when it is paused: the job its BLMOVE takes then is
handed back to the tail of the queue, atomically (the ``give_back`` script), and never runs.
While one of its queues is paused, a thread blocks at most ``PAUSED_BLOCK``, so that a
resume is seen within that time by idle processes too.

The same call writes the tracking outbox (transitions of tracked jobs, see
``asynctask.tracking.outbox``) and reads the cancellation generation, so that tracking adds
no round trip of its own to a busy worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Literal, cast

import redis
from redis.client import Pipeline

from asynctask.brokers.fetcher import Fetcher, UnitOfWork
from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys
from asynctask.settings import QueueSpec
from asynctask.tracking.outbox import Outbox, pack

#: Seconds a thread blocks on one queue (or bell) when there are more of them than threads,
#: so that a queue without a blocked thread is still checked this often.
SHORT_BLOCK = 0.25


def release(
    conn: redis.Redis | Pipeline,
    scripts: Scripts,
    keys: Keys,
    units: Sequence[UnitOfWork],
    action: Literal["end", "retry"] = "end",
) -> None:
    """Remove ``units`` from their in-flight lists (queued, on a pipeline), freeing their
    concurrency slots and unique keys as ``action`` says (see the ``finish`` script)."""
    if not units:
        return
    args: list[str | bytes] = [keys.prefix]
    for unit in units:
        args += ("inflight", action, unit.payload)
    scripts.finish(keys=[str(unit.ref) for unit in units], args=args, client=conn)


def ends_flow(raw: bytes) -> bool:
    """Whether acknowledging ``raw`` may free a concurrency slot, a unique key or a feed slot:
    a cheap byte search here, so that the claim script searches no other payload."""
    return b'concurrency_key"' in raw or b'unique_key"' in raw or b'feed"' in raw


def starts_flow(raw: bytes) -> bool:
    """Whether claiming ``raw`` needs the claim-time flow check (rate limit, unique until start)."""
    return b'rate_limit"' in raw or b'unique_until"' in raw


#: Seconds a thread blocks at most while one of this process's queues is paused: how late an
#: idle process may see the queue resumed.
PAUSED_BLOCK = 1.0

#: Tokens a bell keeps at most (FAIR_BELL in lua/fair_share.lua).
BELL_TOKENS = 64

#: Seconds between two looks for threads still on their way into BLMOVE while going quiet.
UNBLOCK_RECHECK = 0.01


class ReliableFetch(Fetcher):
    """Claims jobs into this process's in-flight lists (``UnitOfWork.ref`` is the list's key)."""

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
        super().__init__(identity, queues, outbox)
        self.redis = conn
        self.keys = keys
        self._queue_keys = {name: keys.queue(name) for name in self.queue_names}
        self._inflight_keys = {name: keys.inflight(identity, name) for name in self.queue_names}
        #: What idle threads block on, spread over in turn: each queue, then the bell of each
        #: fair queue (True), which a job landing in one of its shares rings.
        self._targets = [(name, False) for name in self.queue_names] + [
            (name, True) for name in self.queue_names if self.fair[name]
        ]
        self._block_timeout = timeout if len(self._targets) <= concurrency else min(timeout, SHORT_BLOCK)
        #: Threads blocked on each target now (this one's own count until its wait returns).
        self._blocked_on = [0] * len(self._targets)
        self._bell_targets = {name: index for index, (name, bell) in enumerate(self._targets) if bell}
        self._queue_targets = {name: index for index, (name, bell) in enumerate(self._targets) if not bell}
        #: Whether this start wrote its queues' fair settings to ``asynctask:fifo`` yet.
        self._announced = False
        self._scripts = scripts
        self._script_keys = [
            keys.tracking_stream,
            keys.tracking_seq,
            keys.cancel_generation,
            keys.inflight_registry,
            keys.paused,
        ]
        #: This process's queues that the last claim found paused.
        self._paused: frozenset[str] = frozenset()
        #: Set when the process goes quiet: wakes the threads that wait while every queue is paused.
        self._quiet = threading.Event()
        #: Threads between deciding to block and BLMOVE returning, and whether the process
        #: went quiet (then no thread blocks any more).
        self._blocking = 0
        self._interrupted = False
        self._blocking_lock = threading.Lock()
        #: Set once ``requeue_all(forget=True)`` emptied and unregistered the lists for good;
        #: the heartbeat must not register them again behind it.
        self._left = False
        self._registry_lock = threading.Lock()

    def register(self) -> None:
        """Record this process's in-flight lists so that others can recover them if it dies.

        The first call of a start also writes its queues' fair settings where pushes read
        them (``asynctask:fifo``), in the same round trip: the settings of the worker started
        last win. Jobs already waiting in shares are served whatever the setting says."""
        with self._registry_lock:
            if self._left:
                return
            pipe = self.redis.pipeline(transaction=False)
            if not self._announced:
                fifo = [name for name in self.queue_names if not self.fair[name]]
                fair = [name for name in self.queue_names if self.fair[name]]
                if fifo:
                    pipe.sadd(self.keys.fifo, *fifo)
                if fair:
                    pipe.srem(self.keys.fifo, *fair)
            pipe.hset(
                self.keys.inflight_registry,
                mapping={key: self.identity for key in self._inflight_keys.values()},
            )
            pipe.execute()
            self._announced = True

    def claim(self, wanted: int, acks: list[UnitOfWork], transitions: list[str]) -> list[UnitOfWork]:
        # Threads blocked in Redis cannot take from the buffer until their own wait returns:
        # jobs claimed for them would sit there while they block, out of reach of every
        # other thread. Left waiting, those jobs wake idle threads (a bell, BLMOVE) or go to
        # the next claim.
        with self._blocking_lock:
            wanted = max(min(wanted, 1), wanted - self._blocking)
        order = self.queue_order()
        keys = self._script_keys[:]
        first_queue = len(keys) + 1
        position: dict[str, int] = {}
        for name in order:
            position[self._inflight_keys[name]] = len(keys) + 2
            keys += (self._queue_keys[name], self._inflight_keys[name])
        args: list[str | bytes | int] = [
            wanted,
            self.identity,
            len(transitions),
            pack(transitions),
            self.keys.prefix,
        ]
        plain: list[str | bytes | int] = []
        fed: list[str | bytes | int] = []
        for unit in acks:
            index = position[str(unit.ref)]
            if unit.fed is not None:
                fed += (index, unit.payload, *unit.fed)
            else:
                plain += (-index if ends_flow(unit.payload) else index, unit.payload)
        args += (len(plain) // 2, *plain, len(fed) // 4, *fed)
        found = self._scripts.fetch(keys=keys, args=args)
        self.cancel_generation = found[0]
        # Lua index i (1-based) is a queue key; its in-flight list is KEYS[i + 1], keys[i] here.
        self._paused = frozenset(order[(int(index) - first_queue) // 2] for index in found[1])
        return [
            UnitOfWork(order[(int(index) - first_queue) // 2], job, keys[int(index)])
            for index, job in zip(found[2::2], found[3::2], strict=True)
        ]

    def wait(self, block_on: int) -> UnitOfWork | None:
        """Block on one queue with BLMOVE, so a new job starts at once instead of at a poll.

        The job starts one round trip after it was pushed: the cancel generation, which
        tracking needs as of the claim, comes in the same round trip (a GET pipelined after
        the BLMOVE, which Redis runs once the BLMOVE returns), and is not read at all when
        tracking is off. A second round trip here delayed an idle worker's jobs by 0.1 ms at
        the median, and by up to 1 ms at p90 on a loaded machine (bench/latency/section.py).
        """
        paused = self._paused
        with self._blocking_lock:
            if self._interrupted:
                return None
            # The target fewest threads block on, from ``block_on`` round: a thread woken by a
            # job comes back to the same target, so a plain rotation would let every idle
            # thread gather on one target and leave a bell (or a queue) unwatched. A paused
            # queue and its bell are no targets.
            count = len(self._targets)
            first = block_on % count
            targets = [
                index
                for index in ((first + step) % count for step in range(count))
                if self._targets[index][0] not in paused
            ]
            target = min(targets, key=lambda index: self._blocked_on[index], default=None)
            if target is not None:
                self._blocking += 1
                self._blocked_on[target] += 1
                # The whole fetch timeout only while every target has a thread on it; otherwise
                # the threads go round the targets every SHORT_BLOCK (a lone idle thread of a
                # fair queue alternates between the queue and its bell).
                watched = min(self._blocked_on[index] for index in targets) > 0
                timeout = self._block_timeout if watched else min(self._block_timeout, SHORT_BLOCK)
        if target is None:
            # Every queue is paused: nothing to block on in Redis until a claim finds one resumed.
            self._quiet.wait(min(self._block_timeout, PAUSED_BLOCK))
            return None
        try:
            return self._block(target, min(timeout, PAUSED_BLOCK) if paused else timeout)
        finally:
            with self._blocking_lock:
                self._blocking -= 1
                self._blocked_on[target] -= 1

    def _block(self, target: int, timeout: float) -> UnitOfWork | None:
        name, bell = self._targets[target]
        if bell:
            self._ring(name, timeout)
            return None
        source, inflight = self._queue_keys[name], self._inflight_keys[name]
        pipe = self.redis.pipeline(transaction=False)
        # Redis takes fractional seconds; redis-py's stubs say int.
        pipe.blmove(source, inflight, timeout, "RIGHT", "LEFT")  # type: ignore[arg-type]
        # Redis runs the commands pipelined behind BLMOVE as soon as it returns, so the list
        # is registered before anything else can happen to it (see the claim script).
        pipe.hset(self.keys.inflight_registry, inflight, self.identity)
        # Whether the queue was paused while this thread blocked on it, read right after the
        # move, in the same round trip.
        pipe.sismember(self.keys.paused, name)
        if self.outbox.tracking:
            pipe.get(self.keys.cancel_generation)
        job, _, paused, *generation = pipe.execute()
        if job is None:
            return None
        if paused:
            self._paused |= {name}
            self.requeue([UnitOfWork(name, cast(bytes, job), inflight)])
            return None
        self._hand_over(name)
        if generation:
            self.cancel_generation = cast(bytes, generation[0] or b"0")
        # The connection does not decode responses, so the payload arrives as bytes.
        raw = cast(bytes, job)
        if starts_flow(raw) and not self._admit(inflight, raw):
            return None
        return UnitOfWork(name, raw, inflight)

    def _ring(self, name: str, timeout: float) -> None:
        """Wait for a token of ``name``'s bell: a task's job landed in one of its shares, which
        BLMOVE on ``queue:<name>`` would not see. The job is not taken here (the shares take
        turns): returning None sends the thread straight back to a claim."""
        self.redis.blpop([self.keys.bell(name)], timeout)

    def _hand_over(self, name: str) -> None:
        """This thread leaves ``queue:<name>`` with a job: if none of this process's other
        threads blocks on it while some block on its bell, wake one of those (one token), so
        that it comes back to watch the queue; else a push there (Ruby's) would wait for a
        bell thread's timeout. One command more, only then."""
        bell = self._bell_targets.get(name)
        if bell is None:
            return
        with self._blocking_lock:
            unwatched = self._blocked_on[self._queue_targets[name]] == 1
            waiting = self._blocked_on[bell] > 0
        if unwatched and waiting:
            pipe = self.redis.pipeline(transaction=False)
            pipe.lpush(self.keys.bell(name), "1")
            pipe.ltrim(self.keys.bell(name), 0, BELL_TOKENS - 1)
            pipe.execute()

    def _admit(self, inflight: str, raw: bytes) -> bool:
        """The claim-time flow check the claim script makes, for a job BLMOVE claimed: its rate
        limit (False: it went back to the schedule set) and a unique key held until start. One
        more round trip, for such jobs only."""
        return bool(self._scripts.admit(keys=[inflight], args=[self.keys.prefix, raw]))

    def interrupt(self) -> None:
        """Unblock this process's threads waiting in BLMOVE or on a bell (``CLIENT UNBLOCK``:
        the call returns as if timed out, moving nothing), so that a worker told to stop does
        not wait out ``fetch_timeout``. A thread that decided to block just before is unblocked
        once its BLMOVE reaches Redis; none blocks after this. Connections not opened by
        ``connect`` carry no name to find them by: their threads return at the timeout, as
        Sidekiq's BRPOP does."""
        with self._blocking_lock:
            self._interrupted = True
        self._quiet.set()
        name = self.redis.connection_pool.connection_kwargs.get("client_name")
        deadline = time.monotonic() + self._block_timeout
        while name and self._blocking and time.monotonic() < deadline:
            blocked = [
                int(client["id"])
                for client in self.redis.client_list()
                if client.get("name") == name and client.get("cmd") in ("blmove", "blpop")
            ]
            if blocked:
                pipe = self.redis.pipeline(transaction=False)
                for client_id in blocked:
                    pipe.client_unblock(client_id)
                pipe.execute()
            time.sleep(UNBLOCK_RECHECK)

    def settle(self, acks: list[UnitOfWork], transitions: list[str]) -> None:
        pipe = self.redis.pipeline(transaction=True)
        if transitions:
            self._scripts.record_transitions(self.keys, pipe, transitions)
        release(pipe, self._scripts, self.keys, acks)
        pipe.execute()

    def requeue(self, units: Sequence[UnitOfWork]) -> int:
        """Give claimed jobs back to the tail of their queues (fetched next), atomically,
        each only if it is still in its in-flight list."""
        if not units:
            return 0
        keys = [self.keys.queues]
        args: list[str | bytes] = []
        for unit in units:
            keys += (str(unit.ref), self._queue_keys[unit.queue])
            args += (unit.payload, unit.queue)
        return int(self._scripts.give_back(keys=keys, args=args))

    def held(self) -> list[UnitOfWork]:
        pipe = self.redis.pipeline(transaction=False)
        for key in self._inflight_keys.values():
            pipe.lrange(key, 0, -1)
        return [
            UnitOfWork(name, job, key)
            for (name, key), jobs in zip(self._inflight_keys.items(), pipe.execute(), strict=True)
            for job in jobs
        ]

    def requeue_all(self, *, forget: bool) -> int:
        with self._registry_lock:
            self._left = forget
            return self._requeue_all(forget)

    def _requeue_all(self, forget: bool) -> int:
        self.drop_buffer()
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
