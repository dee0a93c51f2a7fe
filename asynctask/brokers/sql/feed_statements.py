"""The task-feed statements of the SQL broker (docs/internals/feeds-sql.md).

A feed's row (``asynctask_feed``) is its lock: every statement that changes which of its jobs
are held or out runs after the row is locked by ``lock`` or ``lock_of_rows``, in a statement of
its own, so that on PostgreSQL (READ COMMITTED) its snapshot sees every change committed by the
transaction that held the lock before. The one exception, ``release_unkeyed``, locks the feed
itself and checks the row's version instead (see there). Lock order: feeds (by task id) before
unique keys and concurrency keys.
"""

from __future__ import annotations

from sqlalchemy import TextClause, text

from asynctask.brokers.sql.models import HELD

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
    def __init__(self, postgres: bool, stored_payload: str, channel: str) -> None:
        pg = postgres
        greatest = "GREATEST" if pg else "max"
        in_feeds = (
            "task_id = ANY(CAST(:feeds AS TEXT[]))"
            if pg
            else "task_id IN (SELECT value FROM json_each(:feeds))"
        )
        in_ids = "id = ANY(CAST(:ids AS BIGINT[]))" if pg else "id IN (SELECT value FROM json_each(:ids))"
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
        self.create = text(
            "INSERT INTO asynctask_feed (task_id, parallel, spacing, priority, paused, last_release_at, "
            "held, next_at) VALUES (:task_id, :parallel, :spacing, :priority, :paused, NULL, 0, NULL)"
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
        self.release_unkeyed: TextClause | None = text(_release_unkeyed(channel)) if pg else None
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
