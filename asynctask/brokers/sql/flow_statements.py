"""The flow-control statements of the SQL broker (docs/internals/flow-control-sql.md).

Lock order, the same in every transaction, so that none waits in a cycle: unique keys, then
concurrency keys, then rate keys; within each kind, by digest.
"""

from __future__ import annotations

from sqlalchemy import TextClause, text

from asynctask.brokers.sql.models import LANE


class FlowStatements:
    def __init__(self, postgres: bool) -> None:
        pg = postgres
        greatest = "GREATEST" if pg else "max"
        in_ids = "id = ANY(CAST(:ids AS BIGINT[]))" if pg else "id IN (SELECT value FROM json_each(:ids))"

        # Lanes. The upsert takes the key's row lock (PostgreSQL) and stores the limit the
        # pushed job carries.
        # PostgreSQL: every key of a push in one statement, the rows inserted (and so locked)
        # in digest order; SQLite: one execution per key.
        rows = (
            "SELECT * FROM unnest(CAST(:digests AS TEXT[]), CAST(:keys AS TEXT[]), "
            "CAST(:lims AS INTEGER[])) ORDER BY 1"
            if pg
            else "VALUES (:digest, :key, :lim)"
        )
        self.lock_lane = text(
            f"INSERT INTO asynctask_lane (digest, key, lim) {rows} "
            "ON CONFLICT (digest) DO UPDATE SET lim = excluded.lim"
        )
        digests = (
            "digest = ANY(CAST(:digests AS TEXT[]))"
            if pg
            else "digest IN (SELECT value FROM json_each(:digests))"
        )
        #: Locks existing lane rows in digest order (ends of jobs: the limit stays as pushed).
        self.lock_lanes: TextClause | None = (
            text(
                "SELECT digest FROM asynctask_lane WHERE digest = ANY(CAST(:digests AS TEXT[])) "
                "ORDER BY digest FOR UPDATE"
            )
            if pg
            else None  # SQLite's write lock serialises every writer already.
        )
        #: The keys of rows ``:ids``; on PostgreSQL also locked (in digest order), in the same
        #: round trip: the rows' keys never change while their owner ends them.
        self.lanes_of = text(
            "SELECT digest FROM asynctask_lane WHERE digest IN (SELECT lane FROM asynctask_job "
            f"WHERE {in_ids} AND lane IS NOT NULL) ORDER BY digest" + (" FOR UPDATE" if pg else "")
        )

        # Run after the key's lock: on PostgreSQL a statement's snapshot is taken when it
        # starts, so it sees every push committed before the lock was granted. The free slots
        # are the limit less the live rows holding one: nothing to keep in step, nothing leaks.
        def nexts(key: str) -> str:
            return (
                f"SELECT id FROM asynctask_job WHERE lane = {key} AND state = '{LANE}' "
                f"ORDER BY priority, run_at, id LIMIT {greatest}(0, "
                f"COALESCE((SELECT lim FROM asynctask_lane WHERE digest = {key}), 0) - "
                f"(SELECT count(*) FROM asynctask_job WHERE lane = {key} AND holds))"
            )

        # A promoted job keeps its id, so it keeps its push-order place: the fetch orders by
        # (priority, id), and the job runs before the jobs pushed after it. Changing the key
        # would rewrite every index entry of the row.
        promoted = "UPDATE asynctask_job SET state = 'queued', holds = TRUE, run_at = :now WHERE id IN"
        if pg:
            # Every key of ``:digests`` in one statement, a key's line read by index each.
            self.promote = text(
                f"{promoted} (SELECT w.id FROM unnest(CAST(:digests AS TEXT[])) AS d(digest) "
                f"CROSS JOIN LATERAL ({nexts('d.digest')}) AS w) RETURNING queue"
            )
        else:
            # One key per execution.
            self.promote = text(f"{promoted} ({nexts(':digest')}) RETURNING queue")
        #: A key's free slots, and whether jobs wait in its line (a push, under the key's lock).
        self.free_slots = text(
            "SELECT digest, lim - (SELECT count(*) FROM asynctask_job WHERE lane = digest AND holds), "
            f"EXISTS (SELECT 1 FROM asynctask_job WHERE lane = digest AND state = '{LANE}') "
            f"FROM asynctask_lane WHERE {digests}"
        )
        #: The safety sweep: keys with waiting jobs and free slots (one probe per key row).
        self.stalled_lanes = text(
            "SELECT l.digest FROM asynctask_lane AS l WHERE EXISTS (SELECT 1 FROM asynctask_job "
            f"WHERE lane = l.digest AND state = '{LANE}') AND l.lim > (SELECT count(*) "
            "FROM asynctask_job WHERE lane = l.digest AND holds)"
        )
        # Keys with no job waiting or holding a slot are forgotten, as Redis forgets them: their
        # rows are locked first, skipping those a push holds, then deleted by a statement whose
        # snapshot, taken after the locks, sees every push committed before. A job still naming
        # a forgotten key (scheduled, retrying without a slot, dead) recreates it on its way back
        # to the line, with its own limit.
        idle = (
            f"NOT EXISTS (SELECT 1 FROM asynctask_job WHERE lane = digest AND state = '{LANE}') "
            "AND NOT EXISTS (SELECT 1 FROM asynctask_job WHERE lane = digest AND holds)"
        )
        self.idle_lanes = text(
            f"SELECT digest FROM asynctask_lane WHERE {idle} ORDER BY digest LIMIT :limit"
            + (" FOR UPDATE SKIP LOCKED" if pg else "")
        )
        self.drop_lanes = text(f"DELETE FROM asynctask_lane WHERE {digests} AND {idle}")

        # Unique keys. The conditional upsert takes an expired hold over, and leaves (and
        # locks) a live one, whose holder the next statement reads.
        self.take_unique = text(
            "INSERT INTO asynctask_unique (digest, key, jid, expires_at) "
            "VALUES (:digest, :key, :jid, :expires_at) ON CONFLICT (digest) DO UPDATE SET "
            "key = excluded.key, jid = excluded.jid, expires_at = excluded.expires_at "
            "WHERE asynctask_unique.expires_at <= :now RETURNING jid"
        )
        self.unique_holder = text("SELECT jid FROM asynctask_unique WHERE digest = :digest")
        self.release_unique = text("DELETE FROM asynctask_unique WHERE digest = :digest AND jid = :jid")
        self.expire_uniques = text("DELETE FROM asynctask_unique WHERE expires_at <= :now")

        # Rate keys: the key's row is its lock; the log holds the starts of the last window.
        self.lock_rate = text(
            "INSERT INTO asynctask_rate_key (digest, key, next_at) VALUES (:digest, :key, 0) "
            "ON CONFLICT (digest) DO UPDATE SET key = excluded.key RETURNING next_at"
        )
        self.prune_rate = text("DELETE FROM asynctask_rate WHERE digest = :digest AND at <= :cutoff")
        self.rate_window = text(
            "SELECT count(*), min(at) FROM asynctask_rate WHERE digest = :digest AND at > :cutoff"
        )
        self.rate_start = text("INSERT INTO asynctask_rate (digest, at) VALUES (:digest, :now)")
        self.rate_next = text("UPDATE asynctask_rate_key SET next_at = :at WHERE digest = :digest")
        self.expire_rates = text("DELETE FROM asynctask_rate WHERE at <= :cutoff")
        # A claimed job over its rate goes back to the schedule, unclaimed (and not counted as
        # an attempt); a keyed one keeps its slot, so its key's order holds.
        self.postpone = text(
            "UPDATE asynctask_job SET state = 'scheduled', run_at = :at, locked_by = NULL, "
            "locked_at = NULL, attempts = attempts - 1 WHERE id = :id AND locked_by = :me"
        )
