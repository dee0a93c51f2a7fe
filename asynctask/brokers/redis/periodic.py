"""Periodic schedules in Redis (see ``brokers.periodic``), under ``asynctask:periodic:``.

Keys, one per field so that a pass reads every schedule's state in one command:
``declared`` (sorted set: name -> when a worker last declared it), ``info`` (hash: name ->
its declaration's JSON), ``last``, ``jid``, ``run`` (hashes: name -> last tick, last jid
pushed, when), ``paused`` (set of names), ``schedulers`` (sorted set: identity -> last pass),
and ``pass:<second>`` (a pass's lease, expiring).
Only AsyncTask reads them; Sidekiq never does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from typing import cast

import redis

from asynctask.brokers.periodic import (
    FORGET_AFTER,
    SCHEDULER_STALE,
    Declaration,
    Hold,
    ScheduleRecord,
    ScheduleState,
    Tick,
    ready,
)
from asynctask.brokers.redis.push import is_flow
from asynctask.brokers.redis.scripts import Scripts
from asynctask.keys import Keys
from asynctask.tracking.outbox import pack

#: How long a pass's lease outlives it: past a few seconds, nobody asks for that second again.
PASS_LEASE_MS = 5000


class RedisPeriodic:
    errors = (redis.RedisError, OSError)

    def __init__(self, conn: redis.Redis, keys: Keys, scripts: Scripts) -> None:
        self.conn = conn
        self.keys = keys
        self.scripts = scripts

    def _key(self, field: str) -> str:
        return self.keys.periodic(field)

    def declare(self, declarations: Sequence[Declaration], identity: str, now: float) -> None:
        pipe = self.conn.pipeline(transaction=True)
        if declarations:
            pipe.zadd(self._key("declared"), {d.name: now for d in declarations})
            pipe.hset(self._key("info"), mapping={d.name: json.dumps(asdict(d)) for d in declarations})
            for d in declarations:
                pipe.hsetnx(self._key("last"), d.name, d.first_last)
        pipe.zadd(self._key("schedulers"), {identity: now})
        pipe.execute()
        self._forget(now - FORGET_AFTER)

    def _forget(self, before: float) -> None:
        stale = [
            n.decode()
            for n in cast(list[bytes], self.conn.zrangebyscore(self._key("declared"), "-inf", f"({before}"))
        ]
        if not stale:
            return
        pipe = self.conn.pipeline(transaction=True)
        # Only a name still stale when the transaction runs goes: one declared meanwhile stays.
        for name in stale:
            pipe.zrem(self._key("declared"), name)
            for field in ("info", "last", "jid", "run"):
                pipe.hdel(self._key(field), name)
            pipe.srem(self._key("paused"), name)
        pipe.zremrangebyscore(self._key("schedulers"), "-inf", f"({before}")
        pipe.execute()

    def states(self, names: Sequence[str]) -> dict[str, ScheduleState]:
        if not names:
            return {}
        pipe = self.conn.pipeline(transaction=False)
        pipe.hmget(self._key("last"), list(names))
        pipe.smembers(self._key("paused"))
        lasts, paused = pipe.execute()
        paused_names = {p.decode() for p in paused}
        return {
            name: ScheduleState(int(last) if last is not None else None, name in paused_names)
            for name, last in zip(names, lasts, strict=True)
        }

    def lease(self, identity: str, second: int) -> bool:
        pipe = self.conn.pipeline(transaction=False)
        pipe.set(self._key(f"pass:{second}"), identity, nx=True, px=PASS_LEASE_MS)
        pipe.zadd(self._key("schedulers"), {identity: second})
        leased, _ = pipe.execute()
        return bool(leased)

    def others_alive(self, identity: str, now: float) -> bool:
        alive = cast(
            list[bytes], self.conn.zrangebyscore(self._key("schedulers"), now - SCHEDULER_STALE, "+inf")
        )
        return any(member.decode() != identity for member in alive)

    def take(self, ticks: Sequence[Tick], identity: str, now: float, hold: Hold = ready) -> list[str]:
        args: list[str | int] = [self.keys.prefix, repr(now), identity, len(ticks)]
        for tick in ticks:
            if tick.job is None:
                args += [tick.name, tick.at, "", "", "", "", 0, ""]
                continue
            job = tick.job
            flow = "1" if is_flow(job) else ""
            args += [tick.name, tick.at, str(job["jid"]), str(job["queue"]), tick.encoded, flow]
            args += [len(tick.transitions), pack(tick.transitions) if tick.transitions else ""]
        if not hold():
            return []
        return [jid.decode() for jid in self.scripts.periodic_take(args=args)]

    def leave(self, identity: str) -> None:
        self.conn.zrem(self._key("schedulers"), identity)

    def records(self) -> list[ScheduleRecord]:
        pipe = self.conn.pipeline(transaction=True)
        pipe.zrange(self._key("declared"), 0, -1, withscores=True)
        for field in ("info", "last", "jid", "run"):
            pipe.hgetall(self._key(field))
        pipe.smembers(self._key("paused"))
        declared, info, last, jids, runs, paused = pipe.execute()
        records = []
        for raw_name, declared_at in declared:
            name = raw_name.decode()
            try:
                d = json.loads(info.get(raw_name, b"{}"))
            except ValueError:
                d = {}
            records.append(
                ScheduleRecord(
                    name=name,
                    job=str(d.get("job", "")),
                    cron=str(d.get("cron", "")),
                    tz=str(d.get("tz", "")),
                    queue=str(d.get("queue", "")),
                    catch_up=str(d.get("catch_up", "")),
                    declared_at=float(declared_at),
                    last=int(last[raw_name]) if raw_name in last else None,
                    last_jid=jids[raw_name].decode() if raw_name in jids else None,
                    last_enqueued_at=float(runs[raw_name]) if raw_name in runs else None,
                    paused=raw_name in paused,
                )
            )
        return sorted(records, key=lambda r: r.name)

    def set_paused(self, name: str, paused: bool) -> bool:
        if self.conn.zscore(self._key("declared"), name) is None:
            return False
        if paused:
            self.conn.sadd(self._key("paused"), name)
        else:
            self.conn.srem(self._key("paused"), name)
        return True
