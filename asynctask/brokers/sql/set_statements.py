"""The SQL broker's job sets (scheduled, retry, dead): moving a job into one, trimming the dead
set, and the poller's moves of due jobs back to their queues."""

from __future__ import annotations

from sqlalchemy import text

from asynctask.brokers.sql.models import LANE
from asynctask.brokers.sql.predicates import IN_A_SET, STORED_PAYLOAD


class SetStatements:
    def __init__(self, pg: bool) -> None:
        # Retry, dead and release act on the row by id alone, not by owner: if this process
        # was presumed dead and its claim taken back, its outcome still wins over a rerun
        # that has not started (and if the row is gone, the caller inserts one for the set, as
        # Redis would ZADD all the same).
        # A row keeps its slot only if it held one and ``:holds`` says it keeps it (a retry
        # on hold); the caller promotes from the key's line when it frees one.
        self.to_set = text(
            "UPDATE asynctask_job SET state = :state, run_at = :run_at, payload = :payload, "
            "queue = :queue, jid = :jid, priority = :priority, last_error = :last_error, "
            "lane = :lane, holds = (holds AND :holds), "
            "locked_by = NULL, locked_at = NULL WHERE id = :id AND state = 'queued'"
        )
        # ``state = 'dead'`` alone does not let SQLite use the set index: it only sees that a
        # query implies an index predicate when the query repeats it.
        self.trim_dead_by_age = text(
            f"DELETE FROM asynctask_job WHERE state = 'dead' AND {IN_A_SET} AND run_at < :cutoff"
        )
        self.trim_dead_by_count = text(
            "DELETE FROM asynctask_job WHERE id IN (SELECT id FROM asynctask_job "
            f"WHERE state = 'dead' AND {IN_A_SET} ORDER BY run_at DESC, id DESC "
            f"LIMIT {'ALL' if pg else '-1'} OFFSET :keep)"
        )

        # The scheduled/retry poller. PostgreSQL locks the batch it moves, so two pollers
        # never rewrite one job; on SQLite the batch is read before the write lock is taken
        # (the rewrite may write: it buries what it cannot read), and each move checks that
        # the row is still what was read, as Redis's ZREM of the exact member does.
        stored = "payload" if pg else STORED_PAYLOAD
        self.due = text(
            f"SELECT id, {stored}, lane, holds, feed FROM asynctask_job WHERE state = :state AND {IN_A_SET} "
            "AND run_at <= :now ORDER BY run_at, id LIMIT :limit" + (" FOR UPDATE SKIP LOCKED" if pg else "")
        )
        unchanged = f"{stored} = :old"
        # A keyed job that holds no slot enters its key's line; one holding its slot (a retry
        # on hold, a job postponed by its rate) goes straight back to its queue.
        self.move_due = text(
            f"UPDATE asynctask_job SET state = CASE WHEN lane IS NOT NULL AND NOT holds THEN '{LANE}' "
            "ELSE 'queued' END, run_at = :now, payload = :payload, queue = :queue, "
            "jid = :jid, priority = :priority, locked_by = NULL, locked_at = NULL "
            f"WHERE id = :id AND state = :state AND {unchanged}"
        )
        self.drop_due = text(f"DELETE FROM asynctask_job WHERE id = :id AND state = :state AND {unchanged}")
