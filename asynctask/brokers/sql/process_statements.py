"""The SQL broker's worker processes: registration and heartbeats, signals, stats, and the
recovery of the jobs of processes that are not live."""

from __future__ import annotations

from sqlalchemy import TextClause, text

from asynctask.brokers.sql.predicates import now_of


class ProcessStatements:
    def __init__(self, pg: bool) -> None:
        now = now_of(pg)
        live = f"SELECT identity FROM asynctask_process WHERE expires_at > {now}"
        # Recovery: the locks of processes that are not live (expired, or never registered).
        orphaned = f"locked_by IS NOT NULL AND locked_by NOT IN ({live})"
        if pg:
            # The old owner can only be returned by reading it in a subquery.
            self.recover = text(
                "UPDATE asynctask_job AS j SET locked_by = NULL, locked_at = NULL FROM ("
                f"SELECT id, locked_by AS owner FROM asynctask_job WHERE {orphaned} "
                "FOR UPDATE SKIP LOCKED) AS o WHERE j.id = o.id RETURNING o.owner, j.queue"
            )
            self.orphans: TextClause | None = None
        else:
            # Writers are serialised: what this reads is exactly what the update changes.
            self.orphans = text(f"SELECT locked_by, queue FROM asynctask_job WHERE {orphaned}")
            self.recover = text(
                f"UPDATE asynctask_job SET locked_by = NULL, locked_at = NULL WHERE {orphaned}"
            )
        self.forget_dead_processes = text(f"DELETE FROM asynctask_process WHERE expires_at <= {now}")
        self.forget_orphan_signals = text(
            "DELETE FROM asynctask_process_signal "
            "WHERE identity NOT IN (SELECT identity FROM asynctask_process)"
        )

        process_columns = "identity, info, busy, beat, quiet, rss, rtt_us, loop_lag_us, expires_at, work"
        self.beat = text(
            f"INSERT INTO asynctask_process ({process_columns}) VALUES (:identity, :info, :busy, :beat, "
            f":quiet, :rss, :rtt_us, :loop_lag_us, {now} + :ttl, :work) ON CONFLICT (identity) DO UPDATE "
            "SET info = excluded.info, busy = excluded.busy, beat = excluded.beat, quiet = excluded.quiet, "
            "rss = excluded.rss, rtt_us = excluded.rtt_us, loop_lag_us = excluded.loop_lag_us, "
            "expires_at = excluded.expires_at, work = excluded.work"
        )
        self.register = text(
            f"INSERT INTO asynctask_process ({process_columns}) VALUES (:identity, '{{}}', 0, :beat, "
            f":quiet, 0, 0, 0, {now} + :ttl, '{{}}') ON CONFLICT (identity) DO UPDATE SET "
            "expires_at = excluded.expires_at"
        )
        self.pop_signal = text(
            "DELETE FROM asynctask_process_signal WHERE id = (SELECT min(id) FROM asynctask_process_signal "
            "WHERE identity = :identity) RETURNING signal"
        )
        self.add_stat = text(
            "INSERT INTO asynctask_stat (name, value) VALUES (:name, :value) "
            "ON CONFLICT (name) DO UPDATE SET value = asynctask_stat.value + excluded.value"
        )
        self.delete_process = text("DELETE FROM asynctask_process WHERE identity = :identity")
        self.delete_signals = text("DELETE FROM asynctask_process_signal WHERE identity = :identity")
        self.process_count = text(f"SELECT count(*) FROM asynctask_process WHERE expires_at > {now}")
        self.process_live = text(
            f"SELECT count(*) FROM asynctask_process WHERE identity = :identity AND expires_at > {now}"
        )
