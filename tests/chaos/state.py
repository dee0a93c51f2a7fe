"""What a broker holds, read directly (Redis keys, SQL rows), to tell what is stuck and where.

After a drain every job has finished, so anything left is a fault the runtime did not
repair: a job still queued, claimed by a process that no thread of it runs, locked by a
process that died, an in-flight list registered to a dead owner or not registered at all,
a scheduled or retry entry the poller never moved. ``leftovers`` lists each in one line.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol, cast

from sqlalchemy import Engine, text

from asynctask import Client, Registry, Settings
from asynctask.brokers.redis.connection import connect
from asynctask.keys import Keys
from asynctask.middleware import Chain

DRAIN_JOB = "chaos_drain"
FLAKY_JOB = "chaos_flaky"


class BrokerState(Protocol):
    settings: Settings

    def queued(self) -> int:
        """Jobs waiting in a queue, claimed by nobody."""

    def live_processes(self) -> int: ...

    def leftovers(self) -> list[str]: ...

    def locate(self, jids: Iterable[str]) -> dict[str, str]:
        """Where each of ``jids`` is (jid -> key or row description); absent ones are missing."""

    def close(self) -> None: ...


def make_client(settings: Settings) -> Client:
    # An empty registry: the jobs are known by name only, with Sidekiq's defaults, as a
    # client in another code base would push them.
    return Client(settings, registry=Registry(), middleware=Chain())


def push_drain(settings: Settings, jobs: int, pause_ms: int) -> list[str]:
    """Push the drain: ``jobs`` jobs of ``pause_ms`` each, by a client of its own."""
    client = make_client(settings)
    try:
        jids = client.push_bulk({"class": DRAIN_JOB, "args": [[pause_ms]] * jobs})
    finally:
        client.close()
    return [jid for jid in jids if jid is not None]


def push_one(client: Client, job: str = DRAIN_JOB, at: float | None = None) -> str:
    item: dict[str, Any] = {"class": job, "args": [0] if job == DRAIN_JOB else []}
    if at is not None:
        item["at"] = at
    jid = client.push(item)
    assert jid is not None
    return jid


def _jid(raw: bytes | str) -> str:
    try:
        return str(json.loads(raw)["jid"])
    except (ValueError, KeyError, TypeError):
        return f"<unreadable {raw[:40]!r}>"


class RedisState:
    def __init__(self, url: str, settings: Settings) -> None:
        self.settings = settings
        # asynctask's own connect: ``url`` may name the master behind Sentinel.
        self.conn = connect(url)
        self.keys = Keys(settings.namespace)

    def close(self) -> None:
        self.conn.close()

    def _scan(self, pattern: str) -> list[str]:
        return sorted(key.decode() for key in self.conn.scan_iter(match=f"{self.keys.prefix}{pattern}"))

    def _live(self) -> set[str]:
        members = [m.decode() for m in cast(set[bytes], self.conn.smembers(self.keys.processes))]
        return {m for m in members if self.conn.exists(self.keys.process(m))}

    def queued(self) -> int:
        """Jobs waiting to run: in their queues, or held back by their task's feed."""
        waiting = self._scan("queue:*") + self._scan("asynctask:feed-held:*")
        return sum(int(self.conn.llen(key)) for key in waiting)

    def identity_of(self, pid: int) -> str | None:
        """The live process record of the worker with ``pid`` (identities are host:pid:nonce)."""
        return next((i for i in self._live() if i.split(":")[-2] == str(pid)), None)

    def in_flight(self, identity: str, queue: str = "default") -> list[str]:
        """The jids in ``identity``'s in-flight list of ``queue``."""
        key = self.keys.inflight(identity, queue)
        return [_jid(raw) for raw in cast(list[bytes], self.conn.lrange(key, 0, -1))]

    def live_processes(self) -> int:
        return len(self._live())

    def leftovers(self) -> list[str]:
        live = self._live()
        registry = {
            k.decode(): v.decode()
            for k, v in cast(dict[bytes, bytes], self.conn.hgetall(self.keys.inflight_registry)).items()
        }
        found = []
        for key in self._scan("queue:*"):
            if n := int(self.conn.llen(key)):
                found.append(f"{key}: {n} job(s) still queued")
        for key in self._scan("asynctask:inflight|*"):
            if n := int(self.conn.llen(key)):
                owner = key.split("|")[1]
                state = "live" if owner in live else "dead"
                registered = "registered" if registry.get(key) == owner else "NOT registered"
                found.append(f"{key}: {n} job(s) in flight; owner {state}, list {registered}")
        for key, owner in sorted(registry.items()):
            if owner not in live:
                found.append(f"{self.keys.inflight_registry}[{key}]: registration of dead process {owner}")
        for name in (self.keys.schedule, self.keys.retry, self.keys.dead):
            if n := int(self.conn.zcard(name)):
                found.append(f"{name}: {n} entr(y/ies)")
        for key in self._scan("asynctask:feed-held:*"):
            if n := int(self.conn.llen(key)):
                found.append(f"{key}: {n} job(s) still held by their feed")
        for key in self._scan("asynctask:feed-out:*"):
            if n := int(self.conn.hlen(key)):
                found.append(f"{key}: {n} released job(s) that never ended")
        return found

    def locate(self, jids: Iterable[str]) -> dict[str, str]:
        wanted = set(jids)
        where: dict[str, str] = {}
        for key in self._scan("queue:*") + self._scan("asynctask:inflight|*"):
            for raw in cast(list[bytes], self.conn.lrange(key, 0, -1)):
                if (jid := _jid(raw)) in wanted:
                    where[jid] = key
        for name in (self.keys.schedule, self.keys.retry, self.keys.dead):
            for raw in cast(list[bytes], self.conn.zrange(name, 0, -1)):
                if (jid := _jid(raw)) in wanted:
                    where[jid] = name
        return where


class SqlState:
    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.settings = settings
        self.engine = engine

    def close(self) -> None:
        self.engine.dispose()

    def queued(self) -> int:
        with self.engine.connect() as connection:
            return int(
                connection.execute(
                    text("SELECT count(*) FROM asynctask_job WHERE state = 'queued' AND locked_by IS NULL")
                ).scalar_one()
            )

    def _processes(self) -> dict[str, float]:
        with self.engine.connect() as connection:
            rows = connection.execute(text("SELECT identity, expires_at FROM asynctask_process")).all()
        return {str(identity): float(expires) for identity, expires in rows}

    def locked_by_pid(self, pid: int) -> int:
        """Rows claimed by the worker with ``pid`` (identities are host:pid:nonce)."""
        with self.engine.connect() as connection:
            owners = connection.execute(
                text("SELECT locked_by, count(*) FROM asynctask_job WHERE locked_by IS NOT NULL GROUP BY 1")
            ).all()
        return sum(int(n) for owner, n in owners if str(owner).split(":")[-2] == str(pid))

    def live_processes(self) -> int:
        now = time.time()
        return sum(1 for expires in self._processes().values() if expires > now)

    def leftovers(self) -> list[str]:
        now = time.time()
        processes = self._processes()
        with self.engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT queue, state, locked_by, count(*), min(locked_at) FROM asynctask_job "
                    "GROUP BY queue, state, locked_by ORDER BY queue, state, locked_by"
                )
            ).all()
        found = []
        for queue, state, locked_by, n, locked_at in rows:
            where = f"asynctask_job queue={queue} state={state}"
            if locked_by is None:
                found.append(f"{where}: {n} row(s), unlocked")
                continue
            expires = processes.get(str(locked_by))
            owner = "no process record" if expires is None else "live" if expires > now else "expired"
            found.append(
                f"{where}: {n} row(s) locked by {locked_by} ({owner}) since {now - float(locked_at):.1f} s"
            )
        for identity, expires in sorted(processes.items()):
            if expires <= now:
                found.append(f"asynctask_process {identity}: expired {now - expires:.1f} s ago, still listed")
        return found

    def locate(self, jids: Iterable[str]) -> dict[str, str]:
        wanted = set(jids)
        with self.engine.connect() as connection:
            rows = connection.execute(text("SELECT jid, queue, state, locked_by FROM asynctask_job")).all()
        return {
            str(jid): f"row queue={queue} state={state} locked_by={locked_by}"
            for jid, queue, state, locked_by in rows
            if jid in wanted
        }


def summarize(where: dict[str, str], missing: Iterable[str]) -> str:
    """``N jobs: place`` lines for the missing jids, the unlocated ones as 'nowhere (lost)'."""
    places = Counter(where.get(jid, "nowhere in the broker (lost)") for jid in missing)
    return "\n".join(f"  {n} job(s): {place}" for place, n in places.most_common())
