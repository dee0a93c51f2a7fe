"""The read API's tests on each backend: settings, and a way to put data straight into the store.

A ``Store`` writes what a broker would have written (waiting jobs, set entries, heartbeats,
counters) without going through a client or a worker, so each test controls exact bytes,
times and ids, and reads back what the API's actions changed.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy import Engine, delete, insert, select, update

from asynctask import Settings, payload
from asynctask.brokers.reads import SetName
from asynctask.brokers.sql.models import ProcessSignal, QueuedJob, StatCounter, WorkerProcess
from asynctask.keys import Keys

#: The owner of jobs a test takes from a queue, as a worker's fetch would.
WORKER = "vm:1:feedfeedfeed"

_STATES: dict[SetName, str] = {
    "schedule": "scheduled",
    "retry": "retry",
    "dead": "dead",
    "stopped": "stopped",
}

Job = payload.JobDict | bytes | str


@dataclass(frozen=True)
class Beat:
    """A heartbeat's fields, as ``Store.process`` takes them."""

    busy: int
    info: dict[str, Any] | None
    work: dict[str, str]
    alive: bool
    quiet: bool


class Store(ABC):
    def __init__(self, kind: str, settings: Settings) -> None:
        self.kind = kind
        self.settings = settings

    @abstractmethod
    def push(self, job: Job, queue: str = "default", *, priority: int = 0) -> None:
        """Enqueue a job (it runs after those already waiting of its priority)."""

    @abstractmethod
    def add(self, name: SetName, job: Job, score: float) -> None: ...

    @abstractmethod
    def queued(self, queue: str = "default") -> list[payload.JobDict]:
        """The waiting jobs' payloads, the one to run last first."""

    @abstractmethod
    def take(self, queue: str = "default") -> None:
        """Take the next job as a worker fetching it would: it is in flight, no longer waiting."""

    @abstractmethod
    def pop_lowest(self, name: SetName) -> None:
        """Remove the lowest-scored entry, as the poller takes the due end."""

    def process(
        self,
        identity: str,
        *,
        busy: int = 0,
        info: dict[str, Any] | None = None,
        work: dict[str, str] | None = None,
        alive: bool = True,
        quiet: bool = False,
    ) -> None:
        """A heartbeat as a worker writes it; ``alive=False``: a process that died (its
        heartbeat expired) and left its record behind; ``quiet``: one told to take no more jobs."""
        self.beat(identity, Beat(busy, info, work or {}, alive, quiet))

    @abstractmethod
    def beat(self, identity: str, beat: Beat) -> None: ...

    @abstractmethod
    def set_stat(self, name: str, value: int) -> None:
        """A counter: ``processed``, ``failed``, ``processed:YYYY-MM-DD``..."""

    @abstractmethod
    def signals(self, identity: str) -> list[str]:
        """Signals waiting for the process, in the order it will pop them."""


def encoded(job: Job) -> str:
    if isinstance(job, bytes):
        return job.decode()
    return job if isinstance(job, str) else payload.dumps(job)


class RedisStore(Store):
    def __init__(self, settings: Settings, conn: redis.Redis) -> None:
        super().__init__("redis", settings)
        self.conn = conn
        self.keys = Keys(settings.namespace)

    def push(self, job: Job, queue: str = "default", *, priority: int = 0) -> None:
        if priority:
            raise ValueError("Redis queues have no priorities")
        self.conn.lpush(self.keys.queue(queue), encoded(job))
        self.conn.sadd(self.keys.queues, queue)

    def add(self, name: SetName, job: Job, score: float) -> None:
        keys = self.keys
        key = {"schedule": keys.schedule, "retry": keys.retry, "dead": keys.dead, "stopped": keys.stopped}[
            name
        ]
        self.conn.zadd(key, {encoded(job): score})

    def queued(self, queue: str = "default") -> list[payload.JobDict]:
        return [payload.loads(raw) for raw in self.conn.lrange(self.keys.queue(queue), 0, -1)]

    def take(self, queue: str = "default") -> None:
        self.conn.lmove(self.keys.queue(queue), self.keys.inflight(WORKER, queue), "RIGHT", "LEFT")

    def pop_lowest(self, name: SetName) -> None:
        self.conn.zpopmin({"schedule": self.keys.schedule, "retry": self.keys.retry}[name])

    def beat(self, identity: str, beat: Beat) -> None:
        if beat.alive:
            write_process(self.conn, self.keys, identity, busy=beat.busy, quiet=beat.quiet, info=beat.info)
        else:
            self.conn.sadd(self.keys.processes, identity)
        if beat.work:
            self.conn.hset(self.keys.work(identity), mapping=beat.work)

    def set_stat(self, name: str, value: int) -> None:
        # Sidekiq's key names, spelled out rather than taken from Keys.
        self.conn.set(f"{self.settings.namespace}:stat:{name}", value)

    def signals(self, identity: str) -> list[str]:
        waiting = self.conn.lrange(self.keys.signals(identity), 0, -1)
        return [raw.decode() for raw in reversed(waiting)]  # LPUSHed, RPOPped


class SqlStore(Store):
    def __init__(self, kind: str, settings: Settings, engine: Engine) -> None:
        super().__init__(kind, settings)
        self.engine = engine

    def _insert(self, job: Job, queue: str, state: str, run_at: float, priority: int = 0) -> None:
        text = encoded(job)
        jid = _field(text, "jid")
        row = {
            "jid": jid if isinstance(jid, str) else "",
            "queue": queue,
            "state": state,
            "priority": priority,
            "run_at": run_at,
            "payload": text,
            "attempts": 0,
        }
        with self.engine.begin() as conn:
            conn.execute(insert(QueuedJob).values(row))

    def push(self, job: Job, queue: str = "default", *, priority: int = 0) -> None:
        # A queued row's run_at is when it was enqueued, as the SQL broker writes it.
        enqueued_at = payload.timestamp(_field(encoded(job), "enqueued_at"))
        self._insert(job, queue, "queued", enqueued_at or payload.now(), priority)

    def add(self, name: SetName, job: Job, score: float) -> None:
        queue = _field(encoded(job), "queue")
        self._insert(job, queue if isinstance(queue, str) else "default", _STATES[name], score)

    def queued(self, queue: str = "default") -> list[payload.JobDict]:
        query = (
            select(QueuedJob.payload)
            .where(QueuedJob.queue == queue, QueuedJob.state == "queued", QueuedJob.locked_by.is_(None))
            .order_by(QueuedJob.priority.desc(), QueuedJob.id.desc())
        )
        with self.engine.connect() as conn:
            return [payload.loads(raw) for raw in conn.scalars(query)]

    def take(self, queue: str = "default") -> None:
        head = (
            select(QueuedJob.id)
            .where(QueuedJob.queue == queue, QueuedJob.state == "queued", QueuedJob.locked_by.is_(None))
            .order_by(QueuedJob.priority, QueuedJob.id)
            .limit(1)
            .scalar_subquery()
        )
        with self.engine.begin() as conn:
            taken = conn.execute(
                update(QueuedJob)
                .where(QueuedJob.id == head)
                .values(locked_by=WORKER, locked_at=payload.now())
            )
            assert taken.rowcount == 1

    def pop_lowest(self, name: SetName) -> None:
        lowest = (
            select(QueuedJob.id)
            .where(QueuedJob.state == _STATES[name])
            .order_by(QueuedJob.run_at, QueuedJob.id)
            .limit(1)
            .scalar_subquery()
        )
        with self.engine.begin() as conn:
            conn.execute(delete(QueuedJob).where(QueuedJob.id == lowest))

    def beat(self, identity: str, beat: Beat) -> None:
        now = payload.now()
        row = {
            "identity": identity,
            "info": json.dumps(process_info(identity, beat.info), separators=(",", ":")),
            "busy": beat.busy,
            "beat": now,
            "quiet": beat.quiet,
            "rss": 29676,
            "rtt_us": 551,
            "expires_at": now + 60 if beat.alive else now - 1,
            "work": json.dumps(beat.work),
        }
        with self.engine.begin() as conn:
            conn.execute(insert(WorkerProcess).values(row))

    def set_stat(self, name: str, value: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(StatCounter).where(StatCounter.name == name))
            conn.execute(insert(StatCounter).values(name=name, value=value))

    def signals(self, identity: str) -> list[str]:
        query = (
            select(ProcessSignal.signal).where(ProcessSignal.identity == identity).order_by(ProcessSignal.id)
        )
        with self.engine.connect() as conn:
            return list(conn.scalars(query))


def process_info(identity: str, extra: dict[str, Any] | None) -> dict[str, Any]:
    """A process's ``info``, as Sidekiq 6.4.1's heartbeat describes it, with ``extra`` fields."""
    hostname, pid, _ = identity.split(":")
    record: dict[str, Any] = {
        "hostname": hostname,
        "started_at": payload.now() - 100,
        "pid": int(pid),
        "tag": "app",
        "concurrency": 10,
        "queues": ["critical", "default"],
        "labels": ["blue"],
        "identity": identity,
    }
    record.update(extra or {})
    return record


def _field(text: str, name: str) -> Any:
    """A field of a stored payload; None if it is not a JSON object (the tests store some)."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    return decoded.get(name) if isinstance(decoded, dict) else None


def write_process(
    conn: redis.Redis,
    keys: Keys,
    identity: str,
    *,
    busy: int = 0,
    quiet: bool = False,
    info: dict[str, Any] | None = None,
    ttl: int = 60,
) -> None:
    """A process record as Sidekiq 6.4.1's heartbeat writes it."""
    record = process_info(identity, info)
    pipe = conn.pipeline(transaction=True)
    pipe.sadd(keys.processes, identity)
    pipe.hset(
        keys.process(identity),
        mapping={
            "info": json.dumps(record, separators=(",", ":")),
            "busy": busy,
            "beat": repr(payload.now()),
            "rtt_us": 551,
            "quiet": "true" if quiet else "false",
            "rss": 29676,
        },
    )
    pipe.expire(keys.process(identity), ttl)
    pipe.execute()
