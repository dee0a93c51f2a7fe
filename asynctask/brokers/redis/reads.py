"""The read model's primitives on Redis: Sidekiq's lists, sorted sets and process hashes.

Ruby and Python processes share these keys, so everything here reads what either wrote.
Moves out of a sorted set ZREM the exact member inside a script and act only if the ZREM
removed it; the worker's poller moves due entries by the same rule (the ``enqueue_due``
script), so an entry is moved once, never twice, and a stale one is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime
from typing import Any

import redis
from redis.commands.core import Script

from asynctask import payload
from asynctask.brokers.periodic import PeriodicStore
from asynctask.brokers.reads import (
    Backlog,
    BusyKey,
    Move,
    ProcessRecord,
    ReadBackend,
    Scored,
    SetName,
    Snapshot,
    Stored,
    WorkEntry,
)
from asynctask.brokers.redis.periodic import RedisPeriodic
from asynctask.brokers.redis.scripts import Scripts, script_source
from asynctask.errors import PayloadError
from asynctask.keys import Keys
from asynctask.settings import Settings

#: The process hash fields read for each process, in this order.
FIELDS = ("info", "busy", "beat", "quiet", "rss", "rtt_us", "loop_lag_us")
#: Seconds a signal waits in ``<identity>-signals`` for the process's next heartbeat.
SIGNAL_TTL = 60
#: Jobs or entries read per round trip by the scans that look for a jid or a text.
SCAN_PAGE = 100

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


class RedisReader(ReadBackend):
    def __init__(self, connection: redis.Redis, keys: Keys, settings: Settings) -> None:
        self.redis = connection
        self.keys = keys
        self.settings = settings
        # Registering a script costs no round trip; the poller's script moves entries to
        # queues so that "retry now" and the poller follow one rule.
        self._kill: Script = connection.register_script(script_source("kill"))
        self._page: Script = connection.register_script(script_source("page"))
        self._scripts = Scripts(connection)
        self._lists: Script = connection.register_script(script_source("lists"))
        self._sizes: Script = connection.register_script(script_source("sizes"))
        self._delete: Script = connection.register_script(script_source("delete"))
        self._park_queued: Script = connection.register_script(script_source("park_queued"))
        self._park_scored: Script = connection.register_script(script_source("park_scored"))
        self._periodic = RedisPeriodic(connection, keys, Scripts(connection))

    @property
    def periodic(self) -> PeriodicStore:
        return self._periodic

    # Queues: ``queue:<name>`` lists, plus a fair queue's shares (docs/internals/fair-share-redis.md).
    # Producers LPUSH to the head, workers take from the tail.

    def queue_key(self, name: str) -> str:
        return self.keys.queue(name)

    def queue_names(self) -> list[str]:
        # A paused queue that was never pushed to, or was cleared, is in ``paused`` only.
        pipe = self.redis.pipeline(transaction=False)
        pipe.smembers(self.keys.queues)
        pipe.smembers(self.keys.paused)
        known, paused = pipe.execute()
        return sorted({as_text(m) for m in known | paused})

    def queue_pause(self, name: str, paused: bool) -> None:
        # Idle workers need no wake-up on a resume: while one of their queues is paused they
        # block for PAUSED_BLOCK at most (brokers/redis/fetch.py).
        if paused:
            self.redis.sadd(self.keys.paused, name)
        else:
            self.redis.srem(self.keys.paused, name)

    def queue_paused(self, name: str) -> bool:
        return bool(self.redis.sismember(self.keys.paused, name))

    def queue_size(self, name: str) -> int:
        return int(self._sizes(args=[self.keys.prefix, name])[0])

    def _queue_lists(self, name: str) -> list[str]:
        """The lists ``name``'s jobs wait in: ``queue:<name>``, then on a fair queue with
        shares its urgent list and its shares' lists (see ``lua/queue_lists.lua``)."""
        found = self._lists(args=[self.keys.prefix, name])
        return [as_text(key) for key in found[1:]]

    def queue_latency(self, name: str) -> float:
        lists = self._queue_lists(name)
        if len(lists) == 1:
            return payload_latency(self.redis.lindex(lists[0], -1))
        pipe = self.redis.pipeline(transaction=False)
        for key in lists:
            pipe.lindex(key, -1)
        return max(payload_latency(raw) for raw in pipe.execute())

    def queue_rows(self, name: str, page_size: int) -> Iterator[Stored]:
        # A fair queue's lists one after the other: queue:<name> (all Sidekiq sees), then the
        # jobs of its shares.
        for key in self._queue_lists(name):
            yield from self._list_rows(key, page_size)

    def _list_rows(self, key: str, page_size: int) -> Iterator[Stored]:
        # The list changes under the cursor while jobs are deleted, pushed or fetched. As in
        # Sidekiq, each page's start is corrected by how much the list shrank or grew; on top
        # of that a job yielded by the previous page is skipped, so that fetches from the tail
        # while iterating (which shift nothing at the head) do not yield a job twice.
        initial = int(self.redis.llen(key))
        page = 0
        shift = 0
        previous: set[bytes] = set()
        while True:
            start = max(0, page * page_size - shift)
            rows = [as_bytes(row) for row in self.redis.lrange(key, start, start + page_size - 1)]
            if not rows:
                return
            page += 1
            yield from (Stored(raw) for raw in rows if raw not in previous)
            previous = set(rows)
            shift = initial - int(self.redis.llen(key))

    def queue_candidates(self, name: str, jid: str) -> Iterator[Stored]:
        # A scan of the whole list (O(n), as in Sidekiq); matching the bytes first avoids
        # decoding every job of a long queue.
        needle = jid.encode()
        return (row for row in self.queue_rows(name, SCAN_PAGE) if needle in row.raw)

    def queue_delete(self, name: str, job: Stored) -> bool:
        return int(self._delete(args=[self.keys.prefix, name, job.raw])) > 0

    def queue_clear(self, name: str) -> int:
        return self._clear(self.keys.queue(name), "queue", name)

    def _finish(self, key: str, kind: str, raw: bytes) -> bool:
        """Remove one exact entry and end its job (frees its concurrency slot and unique key)."""
        return int(self._scripts.finish(keys=[key], args=[self.keys.prefix, kind, "end", raw])) > 0

    def _clear(self, key: str, kind: str, name: str) -> int:
        # Under asynctask: so that it is no queue's or set's own name.
        scratch = f"{self.keys.prefix}asynctask:clearing:{key}"
        return int(
            self._scripts.clear(keys=[key, self.keys.queues, scratch], args=[self.keys.prefix, kind, name])
        )

    # Sets: the ``schedule``, ``retry`` and ``dead`` sorted sets.

    def set_key(self, name: SetName) -> str:
        keys = self.keys
        return {"schedule": keys.schedule, "retry": keys.retry, "dead": keys.dead, "stopped": keys.stopped}[
            name
        ]

    def set_size(self, name: SetName) -> int:
        return int(self.redis.zcard(self.set_key(name)))

    def set_rows(self, name: SetName, page_size: int) -> Iterator[Scored]:
        key = self.set_key(name)
        lowest = "+inf"
        previous: list[bytes] = []
        while True:
            flat = self._page(keys=[key], args=[page_size, lowest, *reversed(previous)])
            rows = [Scored(as_bytes(flat[i]), float(flat[i + 1])) for i in range(0, len(flat), 2)]
            if not rows:
                return
            yield from rows
            lowest = repr(rows[-1].score)
            previous = [row.raw for row in rows]

    def set_page(self, name: SetName, start: int, count: int) -> list[Scored]:
        return _scored(self.redis.zrange(self.set_key(name), start, start + count - 1, withscores=True))

    def set_scan(self, name: SetName, text: str) -> Iterator[Scored]:
        pattern = "*" + _GLOB_SPECIAL.sub(r"\\\1", text) + "*"
        for raw, score in self.redis.zscan_iter(self.set_key(name), match=pattern, count=SCAN_PAGE):
            yield Scored(as_bytes(raw), float(score))

    def set_candidates(self, name: SetName, jid: str) -> Iterator[Scored]:
        return self.set_scan(name, jid)

    def set_range(self, name: SetName, low: float, high: float) -> list[Scored]:
        rows = self.redis.zrange(
            self.set_key(name), repr(float(low)), repr(float(high)), byscore=True, withscores=True
        )
        return _scored(rows)

    def set_delete(self, name: SetName, entry: Scored) -> bool:
        return self._finish(self.set_key(name), "set", entry.raw)

    def set_clear(self, name: SetName) -> int:
        return self._clear(self.set_key(name), "set", name)

    def set_enqueue(self, name: SetName, moves: Sequence[Move], now: float) -> int:
        if not moves:
            return 0
        keys = [self.set_key(name), self.keys.queues, *(self.keys.queue(m.queue) for m in moves)]
        pairs: list[bytes | str] = []
        for move in moves:
            pairs += (move.entry.raw, move.replacement)
        return int(
            self._scripts.enqueue_due(keys=keys, args=[*pairs, *(m.queue for m in moves), self.keys.prefix])
        )

    def set_kill(self, name: SetName, entries: Sequence[Scored], now: float) -> int:
        if not entries:
            return 0
        s = self.settings
        return int(
            self._kill(
                keys=[self.set_key(name), self.keys.dead],
                args=[
                    repr(now),
                    repr(now - s.dead_timeout),
                    -(s.dead_max_jobs + 1),
                    self.keys.prefix,
                    *(e.raw for e in entries),
                ],
            )
        )

    def dead_add(self, encoded: bytes | str, now: float) -> None:
        s = self.settings
        pipe = self.redis.pipeline(transaction=True)
        pipe.zadd(self.keys.dead, {as_bytes(encoded): now})
        pipe.zremrangebyscore(self.keys.dead, "-inf", now - s.dead_timeout)
        pipe.zremrangebyrank(self.keys.dead, 0, -(s.dead_max_jobs + 1))
        pipe.execute()

    def queue_park(self, name: str, job: Stored, encoded: str, now: float) -> bool:
        args: list[bytes | str] = [self.keys.prefix, name, job.raw, self.keys.stopped, repr(now), encoded]
        return int(self._park_queued(args=args)) > 0

    def set_park(self, name: SetName, entry: Scored, encoded: str, now: float) -> bool:
        keys = [self.set_key(name), self.keys.stopped]
        args: list[bytes | str] = [self.keys.prefix, entry.raw, repr(now), encoded, repr(entry.score)]
        return int(self._park_scored(keys=keys, args=args)) > 0

    # Concurrency keys: ``asynctask:lanes`` lists every key with slot holders or a line.

    def busy_keys(self, limit: int) -> list[BusyKey]:
        """Two round trips: the registry, then each key's holders and line length."""
        registry = self.redis.hgetall(self.keys.lanes)
        if not registry:
            return []
        names = [as_text(key) for key in registry]
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            pipe.smembers(self.keys.lane_holders(name))
            pipe.llen(self.keys.lane(name))
        replies = pipe.execute()
        found = [
            BusyKey(
                key=name,
                limit=_int(stored),
                holders=sorted(as_text(jid) for jid in replies[2 * index]),
                waiting=int(replies[2 * index + 1]),
            )
            for index, (name, stored) in enumerate(zip(names, registry.values(), strict=True))
        ]
        found.sort(key=lambda busy: (-busy.waiting, -len(busy.holders), busy.key))
        return found[:limit]

    # Processes: members of ``processes`` whose ``<identity>`` hash has not expired.

    def processes(self) -> list[ProcessRecord]:
        """One SMEMBERS, then one pipelined HMGET per member.

        Members whose hash expired (a process that died without leaving the set) are removed
        on the way, as Sidekiq's ``ProcessSet`` does.
        """
        return self._read_processes()[0]

    def _read_processes(self) -> tuple[list[ProcessRecord], list[str]]:
        identities = self._members()
        if not identities:
            return [], []
        pipe = self.redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hmget(self.keys.process(identity), FIELDS)
        live: list[ProcessRecord] = []
        stale: list[str] = []
        for identity, values in zip(identities, pipe.execute(), strict=True):
            if values[0] is None:
                stale.append(identity)
            else:
                live.append(_process(identity, values))
        if stale:
            self.redis.srem(self.keys.processes, *stale)
        return live, stale

    def _members(self) -> list[str]:
        return sorted(as_text(m) for m in self.redis.smembers(self.keys.processes))

    def process(self, identity: str) -> ProcessRecord | None:
        # A process that stopped cleanly has left the set, but its record lives on until its
        # TTL (as Sidekiq leaves it): membership is what says it is live.
        pipe = self.redis.pipeline(transaction=False)
        pipe.sismember(self.keys.processes, identity)
        pipe.hmget(self.keys.process(identity), FIELDS)
        member, values = pipe.execute()
        return None if not member or values[0] is None else _process(identity, list(values))

    def signal(self, identity: str, name: str) -> None:
        key = self.keys.signals(identity)
        pipe = self.redis.pipeline(transaction=True)
        pipe.lpush(key, name)
        pipe.expire(key, SIGNAL_TTL)
        pipe.execute()

    def cleanup_processes(self) -> int:
        return len(self._read_processes()[1])

    def work(self) -> list[WorkEntry]:
        """Three round trips at most: members, each ``:work``, then ``:workers`` where ``:work``
        is empty (Sidekiq <= 6.4.1 writes only that; AsyncTask writes both)."""
        identities = self._members()
        if not identities:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for identity in identities:
            pipe.exists(self.keys.process(identity))
            pipe.hgetall(self.keys.work(identity))
        replies = pipe.execute()
        hashes: dict[str, dict[Any, Any]] = {}
        for index, identity in enumerate(identities):
            # A member whose process hash expired is a dead process; its threads are not busy.
            if replies[2 * index]:
                hashes[identity] = replies[2 * index + 1]
        old_style = [identity for identity, threads in hashes.items() if not threads]
        if old_style:
            pipe = self.redis.pipeline(transaction=False)
            for identity in old_style:
                pipe.hgetall(self.keys.workers(identity))
            hashes.update(zip(old_style, pipe.execute(), strict=True))
        return [
            WorkEntry(identity, as_text(tid), value)
            for identity, threads in hashes.items()
            for tid, value in threads.items()
        ]

    def busy(self) -> int:
        identities = self._members()
        if not identities:
            return 0
        pipe = self.redis.pipeline(transaction=False)
        for identity in identities:
            pipe.hget(self.keys.process(identity), "busy")
        return sum(_int(busy) for busy in pipe.execute() if busy is not None)

    # Counters: ``stat:processed``, ``stat:failed`` and their daily keys.

    def stats(self, default_queue: str) -> Snapshot:
        """Two pipelined round trips whatever the number of queues and processes: first the
        counters, set sizes and the members of ``queues`` and ``processes``, then every
        queue's size (its shares' lists counted, see ``lua/sizes.lua``) and every process's ``busy``."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(k.stat_processed)
        pipe.get(k.stat_failed)
        pipe.zcard(k.schedule)
        pipe.zcard(k.retry)
        pipe.zcard(k.dead)
        pipe.zcard(k.stopped)
        pipe.smembers(k.processes)
        pipe.smembers(k.queues)
        pipe.lindex(k.queue(default_queue), -1)
        pipe.get(k.data_losses)
        (processed, failed, scheduled, retries, dead, stopped, members, queue_members, oldest, losses) = (
            pipe.execute()
        )
        identities = sorted(as_text(m) for m in members)
        names = sorted(as_text(m) for m in queue_members)
        replies: list[Any] = []
        if names or identities:
            replies = self._sizes_and_busy(names, identities)
        sizes = [int(size) for size in replies[: len(names)]]
        busy = [_int(b) for b in replies[len(names) :] if b is not None]
        return Snapshot(
            processed=_int(processed),
            failed=_int(failed),
            scheduled_size=int(scheduled),
            retry_size=int(retries),
            dead_size=int(dead),
            stopped_size=int(stopped),
            processes_size=len(busy),
            workers_size=sum(busy),
            default_queue_latency=payload_latency(oldest),
            queues=dict(sorted(zip(names, sizes, strict=True), key=lambda item: (-item[1], item[0]))),
            data_losses=_int(losses),
        )

    def _sizes_and_busy(self, names: list[str], identities: list[str]) -> list[Any]:
        """Each queue's size, then each process's ``busy``, in one round trip: a script in a
        pipeline costs redis-py one more (SCRIPT EXISTS), so EVALSHA is sent as is and the
        script loaded only when Redis does not know it."""
        k = self.keys
        for attempt in (1, 2):
            pipe = self.redis.pipeline(transaction=False)
            if names:
                pipe.evalsha(self._sizes.sha, 0, k.prefix, *names)
            for identity in identities:
                # The process hash expires 60 s after its last beat: no hash, no process.
                pipe.hget(k.process(identity), "busy")
            try:
                replies = pipe.execute()
            except redis.exceptions.NoScriptError:
                if attempt == 2:
                    raise
                self.redis.script_load(self._sizes.script)
                continue
            return [*replies[0], *replies[1:]] if names else list(replies)
        raise AssertionError("unreachable")

    def reset_stats(self, names: Sequence[str]) -> None:
        k = self.keys
        self.redis.mset({k.stat_processed if n == "processed" else k.stat_failed: 0 for n in names})

    def history(self, days: Sequence[date]) -> tuple[list[int], list[int]]:
        moments = [datetime(d.year, d.month, d.day, tzinfo=UTC) for d in days]
        pipe = self.redis.pipeline(transaction=False)
        pipe.mget([self.keys.stat_processed_day(m) for m in moments])
        pipe.mget([self.keys.stat_failed_day(m) for m in moments])
        processed, failed = pipe.execute()
        return [_int(v) for v in processed], [_int(v) for v in failed]

    def tracking_backlog(self) -> Backlog:
        # The flusher deletes what it applied: the stream is the backlog, oldest first, and an
        # entry's id starts with the milliseconds it was added at.
        pipe = self.redis.pipeline(transaction=False)
        pipe.xlen(self.keys.tracking_stream)
        pipe.xrange(self.keys.tracking_stream, count=1)
        entries, oldest = pipe.execute()
        if not oldest:
            return Backlog(int(entries), 0.0)
        added_ms = int(as_text(oldest[0][0]).partition("-")[0])
        return Backlog(int(entries), max(0.0, payload.now() - added_ms / 1000))


def payload_latency(raw: bytes | str | None) -> float:
    """Seconds the job ``raw`` (a queue's tail) has waited since its ``enqueued_at``; 0 without one."""
    if raw is None:
        return 0.0
    try:
        job: dict[str, Any] | None = payload.loads(raw)
    except PayloadError as exc:
        # A job that is not runnable (no class, say) still says when it was enqueued.
        job = exc.job
    enqueued_at = payload.timestamp(job.get("enqueued_at")) if job is not None else None
    return max(0.0, payload.now() - enqueued_at) if enqueued_at else 0.0


def _process(identity: str, values: list[Any]) -> ProcessRecord:
    info, busy, beat, quiet, rss, rtt_us, loop_lag_us = values
    return ProcessRecord(
        identity=identity,
        info=as_text(info),
        busy=_int(busy),
        beat=_float(beat),
        quiet=quiet is not None and as_text(quiet) == "true",
        rss=_int(rss),
        rtt_us=_int(rtt_us),
        loop_lag_us=_int(loop_lag_us),
    )


def _scored(rows: Any) -> list[Scored]:
    """ZRANGE ... WITHSCORES replies, whatever redis-py's union type says they are."""
    return [Scored(as_bytes(raw), float(score)) for raw, score in rows]


def as_bytes(value: bytes | str) -> bytes:
    """Replies are bytes unless the caller's connection was made with ``decode_responses=True``."""
    return value if isinstance(value, bytes) else value.encode()


def as_text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _int(value: Any) -> int:
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
