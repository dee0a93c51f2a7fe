"""Job rows: pushing jobs to queues and the schedule, and staging a task's jobs.

Payloads are the JSON Redis would hold (``payload.dumps``), under the same size limit.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from asynctask import payload
from asynctask.brokers.base import Staging
from asynctask.brokers.sql.flow import Flow, lane_of
from asynctask.brokers.sql.models import HELD, QUEUED, SCHEDULED
from asynctask.brokers.sql.transactions import JobRow, Store, Tx
from asynctask.feeds import Feed

if TYPE_CHECKING:
    from asynctask.brokers.sql.feeds import SqlFeeds

logger = logging.getLogger("asynctask")

#: The ``priority`` column's range (a 32-bit integer); a payload's priority is clamped to it.
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
#: The ``jid`` column's width; longer jids (foreign clients) stay whole in the payload.
JID_WIDTH = 64
#: The shares that keep a row of their turns (``fairness.share_of``): a tenant's tasks follow
#: one another; a task without a tenant is a share of its own and needs none.
REMEMBERED_SHARE = "tenant:"


def priority(job: payload.JobDict) -> int:
    """A job's integer ``priority`` (lower runs first), 0 if it has none."""
    value = job.get("priority")
    if isinstance(value, int) and not isinstance(value, bool):
        return max(PRIORITY_MIN, min(PRIORITY_MAX, value))
    return 0


def jid(job: payload.JobDict) -> str:
    return str(job.get("jid", ""))[:JID_WIDTH]


def row(job: payload.JobDict, state: str, run_at: float, encoded: str, *, holds: bool = False) -> JobRow:
    """A job's row; ``last_error`` from the failure Sidekiq's fields record, if any; ``lane``
    the digest of its concurrency key. ``holds``: whether it keeps the slot it holds (the
    statements keep a slot only where the row held one)."""
    error = (
        _storable(f"{job.get('error_class')}: {job.get('error_message')}") if "error_class" in job else None
    )
    lane = lane_of(job) if "concurrency_key" in job else None
    return (
        jid(job),
        str(job.get("queue", "default")),
        state,
        priority(job),
        run_at,
        encoded,
        error,
        None if lane is None else lane.digest,
        holds,
    )


def is_keyed(job: payload.JobDict, job_row: JobRow) -> bool:
    """Whether a job's row needs the flow checks of its transaction: it has a concurrency key
    (a lane) or a unique key, whose checks read what other pushes wrote."""
    return job_row[7] is not None or "unique_key" in job


def _storable(text: str) -> str:
    """``text`` as any text column takes it: an error message may quote a job's NUL
    characters (PostgreSQL refuses them) or lone surrogates (UTF-8 cannot encode them);
    those are written as Python escapes."""
    if text.isascii() and "\x00" not in text:
        return text
    return text.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")


def push_rows(entries: payload.PushEntries, max_payload_bytes: int) -> list[JobRow]:
    """The rows of pushed jobs, scheduled or queued by ``payload.schedule`` (every queued
    job gets the same fresh ``enqueued_at``). Raises ValueError for a job over the size limit."""
    now = payload.now()
    dues = [payload.schedule(job, at, now) for job, at in entries]
    jobs = [job for job, _ in entries]
    return [
        row(job, QUEUED, now, encoded) if due is None else row(job, SCHEDULED, due, encoded)
        for job, due, encoded in zip(
            jobs, dues, payload.dumps_many_within(jobs, max_payload_bytes), strict=True
        )
    ]


@dataclass(eq=False)
class SqlStaging(Staging):
    """A task's jobs, inserted as queued rows through the task's own SQL transaction: they
    become claimable exactly when the task commits, all of them or none.

    Keyed jobs go through their keys' lines and unique keys are taken in that transaction
    too (a job whose key is held is not inserted); the keys' locks are held until it ends.

    A fed task's jobs (``fed``: its feeds and the feed's settings) are inserted held by its
    feed, whose row the first batch creates; each batch releases what the feed has room for,
    in the same transaction, so the first jobs become claimable when the task commits.

    Every row the task inserts (queued, in a key's line or held) carries its turn in its
    queue's rotation, in item order from the share's start (docs/internals/fair-share-sql.md):
    the rows are tagged whether or not the workers serve the queue fairly, so that the claim
    alone decides."""

    commits_with_task = True

    _store: Store
    _flow: Flow
    _max_payload_bytes: int
    _fed: tuple[SqlFeeds, str, Feed] | None = None
    _share: str | None = None
    #: The next turn of each queue the task has rows in (its batches follow one another).
    _next: dict[str, int] = field(default_factory=dict, init=False)
    _created: bool = field(default=False, init=False)
    #: Whether this staging created the feed (else it holds jobs a running job added to it).
    _fresh: bool = field(default=True, init=False)
    _count: int = field(default=0, init=False)
    #: The queues the task's transaction makes jobs claimable in, each announced once in it.
    _queues: set[str] = field(default_factory=set, init=False)
    _enqueued_at: float | None = field(default=None, init=False)
    #: The turns taken in statements of their own, given back if the task rolls back.
    _taken: list[tuple[str, int, int]] = field(default_factory=list, init=False)

    def encode(self, jobs: Sequence[payload.JobDict]) -> list[tuple[payload.JobDict, JobRow]]:
        """The jobs' rows; every job of the task gets the time its first batch was encoded."""
        if self._enqueued_at is None:
            self._enqueued_at = payload.now()
        for job in jobs:
            job["enqueued_at"] = self._enqueued_at
        state = QUEUED if self._fed is None else HELD
        encoded = payload.dumps_many_within(jobs, self._max_payload_bytes)
        return [
            (job, row(job, state, self._enqueued_at, text)) for job, text in zip(jobs, encoded, strict=True)
        ]

    def write(self, encoded: list[tuple[payload.JobDict, JobRow]], connection: Connection) -> None:
        if self._fed is not None:
            self._write_held(*self._fed, [r for _, r in encoded], connection)
            return
        rows = [r for _, r in encoded]
        lanes: list[str] = []
        # Turns before keys: on SQLite, where the transaction takes the share's row, a tenant's
        # tasks then queue for that row before taking any key.
        starts = self._reserve(connection, [r[1] for r in rows])
        if any(is_keyed(job, r) for job, r in encoded):
            # A job whose unique key is held is not inserted: the last turns stay unused.
            _, rows, lanes = self._flow.admit(connection, encoded, payload.now())
        self._store.insert_jobs(connection, rows, turns=_turns(starts, rows))
        self._count += len(rows)
        queues = {r[1] for r in rows if r[2] == QUEUED}
        queues.update(self._flow.promote(connection, lanes))
        self._announce(connection, queues)

    def _write_held(
        self, feeds: SqlFeeds, task_id: str, feed: Feed, rows: list[JobRow], connection: Connection
    ) -> None:
        """Held rows (their unique keys are not taken: a task's chunk jobs carry none), then
        the release they allow; keyed jobs enter their keys' lines when released."""
        starts = self._reserve(connection, [r[1] for r in rows])
        if not self._created:
            self._fresh = feeds.create(connection, task_id, feed)
            self._created = True
        self._store.insert_jobs(connection, rows, feed=task_id, turns=_turns(starts, rows))
        feeds.add_held(connection, task_id, len(rows))
        self._count += len(rows)
        tx = Tx(connection)
        # A new feed's first jobs go at once; jobs added to a running feed wait for its interval.
        feeds.release(tx, feeds.lock(connection, [task_id]), payload.now(), first=self._fresh)
        self._announce(connection, tx.queues)

    def _announce(self, connection: Connection, queues: Iterable[str]) -> None:
        """Wake the workers of queues new to the transaction when it commits: in it, so that
        no connection of its own is taken after."""
        fresh = set(queues) - self._queues
        self._store.notify(connection, fresh)
        self._queues.update(fresh)

    def _reserve(self, connection: Connection, queues: Sequence[str]) -> dict[str, int]:
        """Reserve turns for a batch's rows (their queues): the first turn of each queue, for
        as many rows as it has here; a statement or two per queue and batch.

        A queue's first batch starts at the queue's head turn (``start_turn``), or, for a
        tenant, after the tenant's last turn if that is later; the next batches go on from
        where the one before stopped, or after the turns of the tenant's tasks made meanwhile."""
        sql = self._store.sql
        starts: dict[str, int] = {}
        remembered = self._share is not None and self._share.startswith(REMEMBERED_SHARE)
        # Queues in name order: the order a transaction takes its share rows' locks in.
        for queue, count in sorted(Counter(queues).items()):
            start = self._next.get(queue)
            if start is None:
                start = int(connection.execute(sql.push.start_turn, {"queue": queue}).scalar_one())
            if remembered:
                start = self._take_turns(connection, queue, start, count)
            starts[queue] = start
            self._next[queue] = start + count
        return starts

    def _take_turns(self, connection: Connection, queue: str, start: int, count: int) -> int:
        """The first of ``count`` turns of the tenant's row, from ``start`` at the earliest.

        On PostgreSQL, in a statement of its own, committed at once: in the task's transaction,
        the row's lock would be held until the task commits, and a tenant's submissions would
        wait for each other's whole transactions (an API serving one tenant, one at a time).
        Each task still gets turns of its own, after those taken before; a task that rolls
        back gives them back (``discard``). SQLite has one writer at a time: the task's own
        transaction takes them."""
        values = {"queue": queue, "share": self._share, "start": start, "n": count}
        if not self._store.postgres:
            return int(connection.execute(self._store.sql.push.take_turns, values).scalar_one()) - count
        with self._store.write(single_statement=True) as tx:
            taken = int(tx.connection.execute(self._store.sql.push.take_turns, values).scalar_one()) - count
        self._taken.append((queue, taken, count))
        return taken

    def publish(self) -> int:
        """The jobs committed with the task, their workers woken by its commit (on SQLite, the
        workers of this process are woken here; the others poll)."""
        if self._queues and self._store.bell is not None:
            self._store.bell.ring()
        return self._count

    def discard(self) -> None:
        """The rows roll back with the task's transaction; the turns taken in statements of
        their own are given back, the last first, where no later task took turns after them
        (a gap in a tenant's turns would only put its next tasks that much later)."""
        taken, self._taken = self._taken, []
        if not taken:
            return
        try:
            with self._store.write() as tx:
                for queue, start, count in reversed(taken):
                    values = {"queue": queue, "share": self._share, "start": start, "n": count}
                    tx.connection.execute(self._store.sql.push.give_back_turns, values)
        except self._store.errors as exc:
            logger.warning("could not give back a rolled-back task's turns: %s", exc)


def _turns(starts: dict[str, int], rows: Sequence[JobRow]) -> list[int]:
    """The rows' turns, in order from each queue's start (``SqlStaging._reserve``)."""
    following = dict(starts)
    turns = []
    for r in rows:
        turns.append(following[r[1]])
        following[r[1]] += 1
    return turns
