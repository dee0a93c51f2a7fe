"""Task feeds in the SQL broker (docs/internals/feeds-sql.md): a fed task's jobs are rows in
state ``held``; a release moves the next of them out, as many as the feed has free slots. Here
are the feed statements (``FeedStatements``) and the releases that run them (``SqlFeeds``).

A release runs inside the caller's write transaction, next to the job change it goes with:
a job's end and the release it makes room for commit together or not at all. The exception
is PostgreSQL's acknowledgement of fed jobs: its release follows its commit, once the process
has counted a step of ends (``ended``, ``release_now``), and the ticker covers a process that
dies in between. A feed's slots are never counted by a counter: its rows out are counted at
each release (from the feed's ``out_from``), so a row ended in any way frees its slot at once.

A feed's row (``asynctask_feed``) is its lock: every statement that changes which of its jobs
are held or out runs after the row is locked by ``lock`` or ``lock_of_rows``, in a statement of
its own, so that on PostgreSQL (READ COMMITTED) its snapshot sees every change committed by the
transaction that held the lock before. The one exception, ``release_unkeyed``, locks the feed
itself and checks the row's version instead (see there). Lock order: feeds (by task id) before
unique keys and concurrency keys.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, NamedTuple

from sqlalchemy import Connection, TextClause, text
from sqlalchemy.exc import SQLAlchemyError

from asynctask import payload
from asynctask.brokers.feeds import Feeds
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.sql.flow import LANE_MARK, Flow, LaneOf, decoded, lane_of
from asynctask.brokers.sql.models import HELD, LANE, QUEUED
from asynctask.brokers.sql.predicates import CHANNEL, STORED_PAYLOAD, ids_of
from asynctask.brokers.sql.transactions import Store, Tx
from asynctask.feeds import FEED_FIELD, Feed, FeedChange, FeedState

#: A feed's held rows: the predicate of the index ``ix_asynctask_job_held``.
IS_HELD = f"state = '{HELD}'"
#: A feed's rows out (released, not ended): the predicate of the index ``ix_asynctask_job_out``.
IS_OUT = "feed IS NOT NULL AND state IN ('queued', 'lane', 'scheduled')"

#: The columns of a feed row as ``lock`` and ``state`` return them.
FEED_COLUMNS = (
    "task_id, parallel, spacing, priority, paused, last_release_at, held, released_run_at, released_id, "
    "out_from"
)


def held_in_order(columns: str, feed: str, limit: str, cursor: str) -> str:
    """A query of the first ``limit`` held rows of ``feed`` in release order (``run_at``,
    ``id``), with ``columns`` and ``run_at`` and ``id``. Rows that rejoined the front have
    ``run_at`` 0 and are read first; the staged rows are read after ``cursor`` (the feed row's
    ``released_run_at, released_id`` as seen by the query), the last of them released: the
    index entries of those released before stay until a vacuum, and walking them made each
    release of a long feed slower than the one before."""
    front = (
        f"SELECT {columns}, run_at, id FROM asynctask_job WHERE feed = {feed} AND {IS_HELD} AND run_at = 0"
    )
    staged = (
        f"SELECT {columns}, run_at, id FROM asynctask_job WHERE feed = {feed} AND {IS_HELD} "
        f"AND run_at > 0 AND (run_at, id) > ({cursor})"
    )
    order = f"ORDER BY run_at, id LIMIT {limit}"
    return (
        f"SELECT * FROM (SELECT * FROM ({front} {order}) AS front_rows "
        f"UNION ALL SELECT * FROM ({staged} {order}) AS staged_rows) AS held_rows {order}"
    )


class FeedStatements:
    """The feed statements, built once per dialect."""

    def __init__(self, postgres: bool) -> None:
        pg = postgres
        stored_payload = "payload" if pg else STORED_PAYLOAD
        greatest = "GREATEST" if pg else "max"
        in_feeds = (
            "task_id = ANY(CAST(:feeds AS TEXT[]))"
            if pg
            else "task_id IN (SELECT value FROM json_each(:feeds))"
        )
        in_ids = ids_of(pg)
        # SQLite's writers are serialised by the file's write lock: no row locks there.
        for_update = " FOR UPDATE" if pg else ""

        self.lock = text(
            f"SELECT {FEED_COLUMNS} FROM asynctask_feed WHERE {in_feeds} ORDER BY task_id{for_update}"
        )
        #: The feeds of rows ``:ids``, locked: the rows' feeds never change while their owner ends them.
        self.lock_of_rows = text(
            f"SELECT {FEED_COLUMNS} FROM asynctask_feed WHERE task_id IN (SELECT feed FROM asynctask_job "
            f"WHERE {in_ids} AND feed IS NOT NULL) ORDER BY task_id{for_update}"
        )
        # A feed that exists is left as it is: the jobs a running job adds to its fed task join it.
        self.create = text(
            "INSERT INTO asynctask_feed (task_id, parallel, spacing, priority, paused, last_release_at, "
            "held, next_at) VALUES (:task_id, :parallel, :spacing, :priority, :paused, NULL, 0, NULL) "
            "ON CONFLICT (task_id) DO NOTHING"
        )
        self.state = text(
            f"SELECT {FEED_COLUMNS}, (SELECT count(*) FROM asynctask_job WHERE feed = :task_id AND {IS_OUT} "
            "AND id >= asynctask_feed.out_from) FROM asynctask_feed WHERE task_id = :task_id"
        )
        # The next held rows, as many as the feed has free slots: its parallel less its rows out,
        # counted now (after the feed's lock), so that nothing kept beside the rows can drift.
        # A keyed row that holds no slot of its key carries its payload: it enters the key's line.
        out = f"SELECT count(*) FROM asynctask_job WHERE feed = :task_id AND {IS_OUT} AND id >= :out_from"
        room = f"{greatest}(0, :parallel - ({out}))"
        self.candidates = text(
            held_in_order(
                f"lane, holds, CASE WHEN lane IS NOT NULL AND NOT holds THEN {stored_payload} END AS lined",
                ":task_id",
                room,
                ":released_run_at, :released_id",
            )
        )
        released = (
            "UPDATE asynctask_job SET state = :state, priority = :priority, run_at = :now "
            f"WHERE {in_ids} AND {IS_HELD}"
        )
        self.release = text(f"{released} RETURNING queue")
        self.after_release = text(
            "UPDATE asynctask_feed SET held = held - :released, next_at = :next_at, "
            "released_run_at = COALESCE(:released_run_at, released_run_at), "
            "released_id = COALESCE(:released_id, released_id), "
            "last_release_at = CASE WHEN :released > 0 THEN :now ELSE last_release_at END, "
            "out_from = CASE WHEN :lowest < out_from THEN :lowest ELSE out_from END "
            "WHERE task_id = :task_id"
        )
        self.add_held = text("UPDATE asynctask_feed SET held = held + :count WHERE task_id = :task_id")
        self.change = text(
            "UPDATE asynctask_feed SET parallel = :parallel, spacing = :spacing, priority = :priority, "
            "paused = :paused WHERE task_id = :task_id"
        )
        # Released jobs not started yet take a new priority at once; held ones take the feed's
        # priority when they are released, so they need no write.
        self.reprioritise = text(
            "UPDATE asynctask_job SET priority = :priority WHERE feed = :task_id AND "
            f"{IS_OUT} AND state IN ('queued', 'lane') AND locked_by IS NULL"
        )
        self.drop_held = text(f"DELETE FROM asynctask_job WHERE feed = :task_id AND {IS_HELD}")
        self.forget = text("DELETE FROM asynctask_feed WHERE task_id = :task_id")
        # The ticker: feeds due, the most overdue first. PostgreSQL skips those another
        # process is releasing (it would only wait to find nothing to do).
        self.due = text(
            "SELECT task_id FROM asynctask_feed WHERE next_at IS NOT NULL AND next_at <= :now "
            "ORDER BY next_at LIMIT :limit" + (" FOR UPDATE SKIP LOCKED" if pg else "")
        )
        self.any_due = text(
            "SELECT 1 FROM asynctask_feed WHERE next_at IS NOT NULL AND next_at <= :now LIMIT 1"
        )
        #: PostgreSQL: the release of the feed ``:feed``, which it locks, in one statement:
        #: the held rows that need no concurrency key, up to the first that does. A row for the
        #: feed if it exists: its task id, its parallel, whether it stopped at a keyed row (its
        #: ``next_at`` is then now, for ``release`` to go on with), how many of its jobs went
        #: out, and whether it was stale (changed after the statement's snapshot: nothing
        #: done). The queues of the jobs released are NOTIFYed (the second column of the row
        #: whose first is NULL counts them).
        self.release_unkeyed: TextClause | None = text(_release_unkeyed(CHANNEL)) if pg else None
        #: A row due again (the retry set) rejoins the front of its feed's held rows.
        self.to_front = text(
            f"UPDATE asynctask_job SET state = '{HELD}', run_at = 0, payload = :payload, queue = :queue, "
            "jid = :jid, locked_by = NULL, locked_at = NULL "
            f"WHERE id = :id AND state = :state AND {stored_payload} = :old"
        )


def _release_unkeyed(channel: str) -> str:
    # One statement, its own transaction (no BEGIN, no COMMIT: one message, one round trip),
    # committed without waiting for the disk (`relaxed`): the feeds' locks it takes (`f`) are
    # what every other release of them waits for. Its snapshot is taken when it starts, maybe
    # before a lock it waited for was granted: then the rows out and held it would read are
    # not those of the feed it locked (a release committed meanwhile, or a job rejoined the
    # front), and it could release too many. Every change of a feed's held or out rows under
    # its lock also writes its row, so the feed row's version tells: when the version locked
    # is not the version in the snapshot (`seen`), the feed is stale and nothing is done for
    # it; the caller runs the statement again for it, with a fresh snapshot. Acknowledgements
    # committed meanwhile (they take no feed lock) only make the count of rows out too high:
    # they release less, and their own process releases for them after.
    # Every queue it released into is NOTIFYed, whatever waits there: a job the statement
    # sees waiting may be a claim's under way, whose commit the snapshot cannot see, and a
    # worker whose own claim skipped that locked job has gone idle, to be woken by this
    # release or else by its fetch timeout, with the feed's jobs waiting meanwhile. (A NOTIFY
    # takes, at commit, the server's notification queue lock; releases of one feed commit
    # one after the other anyway, under its lock.)
    blocked = "f0.spacing > 0 AND f0.last_release_at IS NOT NULL AND :now < f0.last_release_at + f0.spacing"
    held = held_in_order(
        "lane IS NOT NULL AND NOT holds AS keyed", "f.task_id", "f.room", "f.released_run_at, f.released_id"
    )
    return f"""WITH seen AS (SELECT task_id, xmin AS version FROM asynctask_feed
        WHERE task_id = :feed),
    f AS (SELECT f0.task_id, f0.parallel, f0.priority, f0.held, f0.paused,
        f0.released_run_at, f0.released_id, f0.xmin = seen.version AS fresh,
        (SELECT min(id) FROM asynctask_job WHERE feed = f0.task_id AND {IS_OUT}
        AND id >= f0.out_from) AS out_low,
        ({blocked}) AS waiting, f0.last_release_at + f0.spacing AS due,
        CASE WHEN f0.xmin <> seen.version OR f0.paused OR f0.held <= 0 OR ({blocked}) THEN 0
        ELSE GREATEST(0, f0.parallel - (SELECT count(*) FROM asynctask_job
        WHERE feed = f0.task_id AND {IS_OUT} AND id >= f0.out_from)) END AS room
        FROM asynctask_feed AS f0 JOIN seen ON seen.task_id = f0.task_id
        ORDER BY f0.task_id FOR UPDATE OF f0),
    c AS (SELECT f.task_id, j.id, count(*) FILTER (WHERE j.keyed) OVER (PARTITION BY f.task_id
        ORDER BY j.run_at, j.id) AS keyed_so_far, j.run_at FROM f CROSS JOIN LATERAL ({held}) AS j),
    moved AS (UPDATE asynctask_job AS t SET state = 'queued', priority = f.priority, run_at = :now
        FROM c JOIN f ON f.task_id = c.task_id WHERE t.id = c.id AND c.keyed_so_far = 0 AND t.{IS_HELD}
        RETURNING t.feed, t.queue, t.id),
    n AS (SELECT f.task_id, f.parallel, f.fresh, f.held - released.count AS left,
        released.count AS released,
        EXISTS (SELECT 1 FROM c WHERE c.task_id = f.task_id AND c.keyed_so_far > 0) AS cut,
        f.paused, f.waiting, f.due, last.run_at AS last_run_at, last.id AS last_id,
        LEAST(f.out_low, (SELECT min(moved.id) FROM moved WHERE moved.feed = f.task_id)) AS out_from
        FROM f CROSS JOIN LATERAL (SELECT count(*) FROM moved WHERE moved.feed = f.task_id) AS released
        LEFT JOIN LATERAL (SELECT c.run_at, c.id FROM c WHERE c.task_id = f.task_id
        AND c.keyed_so_far = 0 AND c.run_at > 0 ORDER BY c.run_at DESC, c.id DESC LIMIT 1) AS last ON true),
    changed AS (UPDATE asynctask_feed AS g SET held = n.left,
        last_release_at = CASE WHEN n.released > 0 THEN :now ELSE g.last_release_at END,
        next_at = CASE WHEN n.paused OR n.left <= 0 THEN NULL WHEN n.cut THEN :now
        WHEN n.waiting THEN n.due ELSE :now + :safety END,
        released_run_at = COALESCE(n.last_run_at, g.released_run_at),
        released_id = COALESCE(n.last_id, g.released_id), out_from = COALESCE(n.out_from, g.out_from)
        FROM n WHERE g.task_id = n.task_id AND n.fresh),
    relaxed AS (SELECT set_config('synchronous_commit', 'off', true))
    SELECT NULL, (SELECT count(pg_notify('{channel}', q)) FROM (SELECT DISTINCT queue AS q FROM moved) AS d),
        NULL, NULL, NULL FROM relaxed
    UNION ALL SELECT task_id, parallel, cut, released, NOT fresh FROM n"""


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
        self.statements = FeedStatements(store.sql.postgres)
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
        return list(connection.execute(self.statements.lock, {"feeds": self._list(wanted)}).all())

    def lock_of_rows(self, connection: Connection, ids: Sequence[int]) -> list[Any]:
        """Lock the feeds of job rows ``ids`` and return their rows."""
        if not ids:
            return []
        return list(connection.execute(self.statements.lock_of_rows, {"ids": self._store.sql.ids(ids)}).all())

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
        for lane, holds, raw, run_at, row_id in connection.execute(self.statements.candidates, params):
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
                connection.execute(self.statements.release, {**values, "ids": ids, "state": QUEUED}).scalars()
            )
            released += len(found_queues)
            tx.announce(str(q) for q in found_queues)
        if lined:
            ids = self._store.sql.ids(lined)
            released += len(
                connection.execute(self.statements.release, {**values, "ids": ids, "state": LANE}).all()
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
        statement = self.statements.release_unkeyed
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
            self.statements.after_release,
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
            connection.execute(self.statements.add_held, {"task_id": task_id, "count": count})

    def create(self, connection: Connection, task_id: str, feed: Feed) -> bool:
        """Create the task's feed; False, changing nothing, if it has one (jobs added to it)."""
        created = connection.execute(
            self.statements.create,
            {
                "task_id": task_id,
                "parallel": feed.parallel,
                "spacing": feed.interval,
                "priority": feed.priority,
                "paused": feed.paused,
            },
        )
        return bool(created.rowcount)

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
                self.statements.change,
                {
                    "task_id": task_id,
                    "parallel": changed.parallel,
                    "spacing": changed.interval,
                    "priority": changed.priority,
                    "paused": changed.paused,
                },
            )
            if changed.priority != current.priority:
                connection.execute(
                    self.statements.reprioritise, {"task_id": task_id, "priority": changed.priority}
                )
            [locked] = self.lock(connection, [task_id])
            self.release(tx, [locked], now)
            return self._state(connection, task_id)

    def state(self, task_id: str) -> FeedState | None:
        with self._store.read() as connection:
            return self._state(connection, task_id)

    def _state(self, connection: Connection, task_id: str) -> FeedState | None:
        row = connection.execute(self.statements.state, {"task_id": task_id}).first()
        if row is None:
            return None
        return FeedState(feed=_feed(row), held=int(row.held), out=int(row[-1]))

    def cancel(self, task_id: str) -> int:
        with self._store.write() as tx:
            connection = tx.connection
            if not self.lock(connection, [task_id]):
                return 0
            dropped = int(connection.execute(self.statements.drop_held, {"task_id": task_id}).rowcount)
            connection.execute(self.statements.forget, {"task_id": task_id})
            return dropped

    def tick(self) -> int:
        released = self._flush_ended()
        now = payload.now()
        params = {"now": now, "limit": TICK_FEEDS}
        # A read first: nothing due (the usual case) costs one indexed SELECT, no transaction.
        with self._store.read() as connection:
            if connection.execute(self.statements.any_due, params).first() is None:
                return released
        with self._store.write() as tx:
            due = [str(t) for t in tx.connection.execute(self.statements.due, params).scalars()]
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
