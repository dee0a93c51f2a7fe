"""Task feeds in the SQL broker (docs/internals/feeds-sql.md): a fed task's jobs are rows in
state ``held``; a release moves the next of them out, as many as the feed has free slots.

A release runs inside the caller's write transaction, next to the job change it goes with:
a job's end and the release it makes room for commit together or not at all. The exception
is PostgreSQL's acknowledgement of fed jobs: its release follows its commit, once the process
has counted a step of ends (``ended``, ``release_now``), and the ticker covers a process that
dies in between. A feed's slots are never counted by a counter: its rows out are counted at
each release (from the feed's ``out_from``), so a row ended in any way frees its slot at once.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, NamedTuple

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from asynctask import payload
from asynctask.brokers.feeds import Feeds
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.sql.flow import Flow
from asynctask.brokers.sql.flow_fields import LANE_MARK, LaneOf, decoded, lane_of
from asynctask.brokers.sql.models import LANE, QUEUED
from asynctask.brokers.sql.transactions import Store, Tx
from asynctask.feeds import FEED_FIELD, Feed, FeedChange, FeedState

#: How a fed job's payload names its feed (``FEED_FIELD``), searched as bytes.
FEED_MARK = b'"feed"'
#: Seconds after which the ticker looks again at a feed that still holds jobs, whatever woke
#: it last: the safety net for a slot freed by something that released nothing: a process
#: that died between an acknowledgement's commit and its release (PostgreSQL releases right
#: after), or a row deleted by hand.
SAFETY_LOOK = 1.0
#: Feeds released per ``tick`` at most (one transaction).
TICK_FEEDS = 50
#: Runs of a release statement for a feed that a concurrent release keeps changing.
STALE_TRIES = 3
#: Feeds whose step a process remembers; past this it forgets them all and learns again.
KNOWN_STEPS = 4096


class Cursor(NamedTuple):
    """The last staged row a feed released, in release order (see ``held_in_order``)."""

    run_at: float
    id: int


def release_step(parallel: int) -> int:
    """How many ends of a feed's jobs one process counts before it releases from the feed
    (PostgreSQL): a tenth of ``parallel``, at least one. A release is a transaction that every
    other release of the feed waits for; one per end made a feed's releases, not its jobs, the
    limit of its drain. The feed then runs between ``parallel`` less a step per process and
    ``parallel`` jobs out, never more."""
    return max(1, parallel // 10)


def is_fed(raw: bytes | str) -> bool:
    """Whether this job may be a fed task's (a substring test only)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return FEED_MARK in data


def fed_by(raw: bytes | str) -> str | None:
    """The feed a stored job names, if its payload is a job naming one."""
    job = decoded(raw, FEED_MARK)
    return None if job is None else feed_of(job)


def feed_of(job: payload.JobDict) -> str | None:
    """The feed a pushed job names, if it can be one (a task id)."""
    return a_feed(job.get(FEED_FIELD))


def a_feed(value: object) -> str | None:
    """``value`` if it can be a feed (a task id)."""
    if type(value) is not str or not 0 < len(value) <= 32 or "\x00" in value:
        return None
    return value


def acknowledged_feed(unit: UnitOfWork) -> str | None:
    """The feed an acknowledged fed job names: as the worker that ran it read it, or else
    from its payload."""
    return a_feed(unit.fed[0]) if unit.fed is not None else fed_by(unit.payload)


class SqlFeeds(Feeds):
    errors = (SQLAlchemyError, OSError)

    def __init__(self, store: Store, flow: Flow) -> None:
        self._store = store
        self._sql = store.sql.feeds
        self._flow = flow
        # Ends acknowledged by this process and not released for yet, by feed; and each
        # feed's step, learnt from its releases (unknown: release at once).
        self._ended: Counter[str] = Counter()
        self._steps: dict[str, int] = {}
        self._counting = threading.Lock()

    def ended(self, feeds: Counter[str]) -> None:
        """Count ends of fed jobs that this process acknowledged (PostgreSQL, after the commit)
        and release from the feeds whose count reached their step; ``tick`` releases the rest."""
        with self._counting:
            self._ended.update(feeds)
            due = [feed for feed, count in self._ended.items() if count >= self._steps.get(feed, 1)]
            for feed in due:
                del self._ended[feed]
        if due:
            self.release_now(due)

    def _flush_ended(self) -> int:
        """Release from every feed with ends counted and not released for yet."""
        with self._counting:
            feeds = list(self._ended)
            self._ended.clear()
        return self.release_now(feeds) if feeds else 0

    # Locks, taken before any unique or concurrency key of the transaction.

    def lock(self, connection: Connection, task_ids: Iterable[str]) -> list[Any]:
        """Lock the feeds (those that exist) and return their rows, in task id order."""
        wanted = sorted(set(task_ids))
        if not wanted:
            return []
        return list(connection.execute(self._sql.lock, {"feeds": self._list(wanted)}).all())

    def lock_of_rows(self, connection: Connection, ids: Sequence[int]) -> list[Any]:
        """Lock the feeds of job rows ``ids`` and return their rows."""
        if not ids:
            return []
        return list(connection.execute(self._sql.lock_of_rows, {"ids": self._store.sql.ids(ids)}).all())

    # Releases.

    def release(
        self, tx: Tx, feeds: Sequence[Any], now: float, *, lanes_held: bool = False, first: bool = False
    ) -> int:
        """Release from each locked feed (rows of ``lock``) what it allows now; return how many
        jobs went out. ``lanes_held``: the transaction holds concurrency keys' locks already
        (an end of keyed jobs); the release then stops before a held keyed job, which is
        released right after the commit, in a transaction that takes the feed's lock and then
        the keys' (taking more keys' locks after some are held could deadlock with another
        feed's release); the feed is due now, so the ticker releases it if that fails.
        ``first``: the publish of the task, which no interval delays."""
        return sum(self._release(tx, feed, now, lanes_held and self._store.postgres, first) for feed in feeds)

    def _release(self, tx: Tx, feed: Any, now: float, lanes_held: bool, first: bool) -> int:
        connection = tx.connection
        held = int(feed.held)
        if feed.paused or held <= 0:
            self._after(connection, feed.task_id, 0, None, now)
            return 0
        last = feed.last_release_at
        if not first and feed.spacing > 0 and last is not None and now < last + feed.spacing:
            self._after(connection, feed.task_id, 0, last + feed.spacing, now)
            return 0
        cursor = Cursor(float(feed.released_run_at), int(feed.released_id))
        params = {
            "task_id": feed.task_id,
            "parallel": int(feed.parallel),
            "released_run_at": cursor.run_at,
            "released_id": cursor.id,
            "out_from": int(feed.out_from),
        }
        queued: list[int] = []
        lined: list[int] = []
        lanes: dict[str, LaneOf] = {}
        deferred = False
        for lane, holds, raw, run_at, row_id in connection.execute(self._sql.candidates, params):
            job = None if lane is None or holds else decoded(raw, LANE_MARK)
            found = None if job is None else lane_of(job)
            if found is not None and found.digest == lane:
                if lanes_held:
                    deferred = True
                    break
                lanes[found.digest] = found
                lined.append(int(row_id))
            else:
                # Unkeyed, holding its key's slot already (a retry on hold), or a key that
                # cannot be read from its payload (it runs without it, as a push would).
                queued.append(int(row_id))
            if run_at > 0:
                cursor = Cursor(float(run_at), int(row_id))
        released = 0
        values = {"priority": int(feed.priority), "now": now}
        if lanes:
            self._flow.take_lanes(connection, lanes.values())
        if queued:
            ids = self._store.sql.ids(queued)
            found_queues = list(
                connection.execute(self._sql.release, {**values, "ids": ids, "state": QUEUED}).scalars()
            )
            released += len(found_queues)
            tx.announce(str(q) for q in found_queues)
        if lined:
            ids = self._store.sql.ids(lined)
            released += len(
                connection.execute(self._sql.release, {**values, "ids": ids, "state": LANE}).all()
            )
            # Through the keys' lines, as a push: the first jobs take the free slots.
            tx.announce(self._flow.promote(connection, lanes, now))
        remaining = held - released
        if remaining <= 0:
            next_at: float | None = None
        elif deferred:
            next_at = now
            tx.after_commit.append(partial(self.release_now, [str(feed.task_id)]))
        else:
            next_at = now + SAFETY_LOOK
        self._after(
            connection, feed.task_id, released, next_at, now, cursor, min(queued + lined, default=None)
        )
        return released

    def release_now(self, task_ids: Sequence[str]) -> int:
        """Release from these feeds in a transaction of their own; return how many jobs went out.

        On PostgreSQL it is one statement in one round trip (``release_unkeyed``), which locks
        the feeds, releases and commits without waiting for the write-ahead log to reach the
        disk: the lock is what every other release of the feeds waits for, so it is held for
        no client round trip and no disk write; a release that a crash of the server loses only
        leaves its jobs held, to be released again (it acknowledges, claims and records
        nothing). A feed whose next held job needs a concurrency key goes on through its key's
        line in a transaction after it."""
        statement = self._sql.release_unkeyed
        if statement is None:
            with self._store.write() as tx:
                return self.release(tx, self.lock(tx.connection, task_ids), payload.now())
        released, keyed, now = 0, [], payload.now()
        # One feed per statement, prepared at its first run on the connection with its generic
        # plan (``pipelined``): planning it costs more than running it. A feed that changed
        # between the statement's snapshot and its lock (``release_unkeyed``) is released again
        # with a fresh snapshot; one changed at every try is left to whatever changed it, which
        # released, and to the ticker's safety look.
        for feed in sorted(set(task_ids)):
            for _ in range(STALE_TRIES):
                params = {"feed": feed, "now": now, "safety": SAFETY_LOOK}
                found = [row for row in self._store.pipelined([(statement, params)]) if row[0] is not None]
                if not found:
                    break
                [(_, parallel, cut, count, stale)] = found
                with self._counting:
                    if len(self._steps) > KNOWN_STEPS:
                        self._steps.clear()
                    self._steps[feed] = release_step(int(parallel))
                released += int(count)
                if cut:
                    keyed.append(feed)
                if not stale:
                    break
                now = payload.now()
        if not keyed:
            return released
        with self._store.write() as tx:
            return released + self.release(tx, self.lock(tx.connection, keyed), now)

    def _after(
        self,
        connection: Connection,
        task_id: str,
        released: int,
        next_at: float | None,
        now: float,
        cursor: Cursor | None = None,
        lowest: int | None = None,
    ) -> None:
        """The feed row after a release: ``lowest``, the smallest id released, lowers its
        ``out_from`` (a row that rejoined the front keeps its id, maybe below it)."""
        connection.execute(
            self._sql.after_release,
            {
                "task_id": task_id,
                "released": released,
                "next_at": next_at,
                "now": now,
                "released_run_at": None if cursor is None else cursor.run_at,
                "released_id": None if cursor is None else cursor.id,
                "lowest": lowest,
            },
        )

    def add_held(self, connection: Connection, task_id: str, count: int) -> None:
        if count:
            connection.execute(self._sql.add_held, {"task_id": task_id, "count": count})

    def create(self, connection: Connection, task_id: str, feed: Feed) -> None:
        connection.execute(
            self._sql.create,
            {
                "task_id": task_id,
                "parallel": feed.parallel,
                "spacing": feed.interval,
                "priority": feed.priority,
                "paused": feed.paused,
            },
        )

    # The Feeds interface.

    def update(self, task_id: str, change: FeedChange) -> FeedState | None:
        now = payload.now()
        with self._store.write() as tx:
            connection = tx.connection
            [found] = self.lock(connection, [task_id]) or [None]
            if found is None:
                return None
            current = _feed(found)
            changed = current.changed(change)
            connection.execute(
                self._sql.change,
                {
                    "task_id": task_id,
                    "parallel": changed.parallel,
                    "spacing": changed.interval,
                    "priority": changed.priority,
                    "paused": changed.paused,
                },
            )
            if changed.priority != current.priority:
                connection.execute(self._sql.reprioritise, {"task_id": task_id, "priority": changed.priority})
            [locked] = self.lock(connection, [task_id])
            self.release(tx, [locked], now)
            return self._state(connection, task_id)

    def state(self, task_id: str) -> FeedState | None:
        with self._store.read() as connection:
            return self._state(connection, task_id)

    def _state(self, connection: Connection, task_id: str) -> FeedState | None:
        row = connection.execute(self._sql.state, {"task_id": task_id}).first()
        if row is None:
            return None
        return FeedState(feed=_feed(row), held=int(row.held), out=int(row[-1]))

    def cancel(self, task_id: str) -> int:
        with self._store.write() as tx:
            connection = tx.connection
            if not self.lock(connection, [task_id]):
                return 0
            dropped = int(connection.execute(self._sql.drop_held, {"task_id": task_id}).rowcount)
            connection.execute(self._sql.forget, {"task_id": task_id})
            return dropped

    def tick(self) -> int:
        released = self._flush_ended()
        now = payload.now()
        params = {"now": now, "limit": TICK_FEEDS}
        # A read first: nothing due (the usual case) costs one indexed SELECT, no transaction.
        with self._store.read() as connection:
            if connection.execute(self._sql.any_due, params).first() is None:
                return released
        with self._store.write() as tx:
            due = [str(t) for t in tx.connection.execute(self._sql.due, params).scalars()]
            return released + self.release(tx, self.lock(tx.connection, due), now)

    def _list(self, values: list[str]) -> Any:
        return values if self._store.postgres else json.dumps(values)


def _feed(row: Any) -> Feed:
    return Feed(
        parallel=int(row.parallel),
        interval=float(row.spacing),
        priority=int(row.priority),
        paused=bool(row.paused),
    )
