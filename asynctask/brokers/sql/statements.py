"""Every statement of the SQL broker, built once per dialect (SQLite or PostgreSQL).

Predicates that select claimable rows (``state = 'queued' AND locked_by IS NULL``) and set
rows (``state <> 'queued'``) are spelled as literals, exactly as the partial indexes of
``models`` define them: SQLite and PostgreSQL use a partial index only when they can see
that a query implies its predicate, which a bound parameter hides.

Times a process's liveness is judged by (``expires_at``) come from PostgreSQL's clock there,
so that hosts with skewed clocks agree on who is dead, as Redis's TTLs make them agree;
SQLite is one file on one host, whose clock the ``:now`` parameter carries.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import TextClause, text

from asynctask.brokers.sql.feedsql import FeedStatements
from asynctask.brokers.sql.flowsql import FlowStatements
from asynctask.brokers.sql.models import LANE

#: The channel NOTIFY announces new jobs on; the payload is the queue's name.
CHANNEL = "asynctask_jobs"

#: Claimable rows: the predicate of the index ``ix_asynctask_job_fetch``.
CLAIMABLE = "state = 'queued' AND locked_by IS NULL"
#: The job sets (scheduled, retry, dead): the predicate of the index ``ix_asynctask_job_set``.
IN_A_SET = "state <> 'queued'"

#: The cancellation generation: it changes whenever a task is cancelled (cancellations are
#: never removed, and a new one adds a row).
GENERATION = "SELECT count(*) || ':' || coalesce(max(at), 0) FROM asynctask_cancelled_task"

JOB_COLUMNS = ("jid", "queue", "state", "priority", "run_at", "payload", "last_error", "lane", "holds")

#: SQLite: a job's payload as the bytes stored. SQLite keeps whatever it is given, a BLOB or
#: text that is not UTF-8 (which the driver cannot read as a string), if something other than
#: AsyncTask wrote the row; read as bytes, such a payload is buried like any other that is
#: not a job, instead of failing every claim. PostgreSQL only stores valid UTF-8 text.
STORED_PAYLOAD = "CAST(payload AS BLOB)"


class Statements:
    def __init__(self, dialect: str) -> None:
        if dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"the SQL broker supports SQLite and PostgreSQL, not {dialect}")
        self.postgres = dialect == "postgresql"
        pg = self.postgres
        now = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)" if pg else ":now"
        ids = "id = ANY(CAST(:ids AS BIGINT[]))" if pg else "id IN (SELECT value FROM json_each(:ids))"
        live = f"SELECT identity FROM asynctask_process WHERE expires_at > {now}"
        #: "Now" as liveness is judged (for the read API's queries of processes).
        self.expiry_now = now
        self.flow = FlowStatements(pg)
        self.feeds = FeedStatements(pg, "payload" if pg else STORED_PAYLOAD, CHANNEL)

        if pg:
            # One statement whatever the batch: the rows travel as arrays.
            kinds = ("TEXT", "TEXT", "TEXT", "INTEGER", "DOUBLE PRECISION", "TEXT", "TEXT", "TEXT", "BOOLEAN")
            arrays = ", ".join(
                f"CAST(:{name} AS {kind}[])" for name, kind in zip(JOB_COLUMNS, kinds, strict=True)
            )
            self.insert_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, attempts) "
                f"SELECT *, 0 FROM unnest({arrays})"
            )
            # Fed jobs, with their feed: a statement of their own, so that every other insert
            # carries no column more.
            self.insert_fed_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, feed, attempts) "
                f"SELECT *, 0 FROM unnest({arrays}, CAST(:feed AS TEXT[]))"
            )
        else:
            # Run as executemany: SQLite has no round trips to save.
            self.insert_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, 0)"
            )
            self.insert_fed_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, feed, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, :feed, 0)"
            )

        self.ack = text(f"DELETE FROM asynctask_job WHERE {ids} AND locked_by = :me")
        self.unlock = text(
            f"UPDATE asynctask_job SET locked_by = NULL, locked_at = NULL WHERE {ids} AND locked_by = :me"
        )
        self.unlock_all = text(
            "UPDATE asynctask_job SET locked_by = NULL, locked_at = NULL WHERE locked_by = :me"
        )
        #: ``unlock_all`` for a dead process: the queue of each job it gave back.
        self.give_back = text(
            "UPDATE asynctask_job SET locked_by = NULL, locked_at = NULL WHERE locked_by = :me "
            "RETURNING queue"
        )
        self.release = text("DELETE FROM asynctask_job WHERE id = :id AND state = 'queued'")
        self.generation = text(GENERATION)

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

        process_columns = "identity, info, busy, beat, quiet, rss, rtt_us, expires_at, work"
        self.beat = text(
            f"INSERT INTO asynctask_process ({process_columns}) VALUES (:identity, :info, :busy, :beat, "
            f":quiet, :rss, :rtt_us, {now} + :ttl, :work) ON CONFLICT (identity) DO UPDATE SET "
            "info = excluded.info, busy = excluded.busy, beat = excluded.beat, quiet = excluded.quiet, "
            "rss = excluded.rss, rtt_us = excluded.rtt_us, expires_at = excluded.expires_at, "
            "work = excluded.work"
        )
        self.register = text(
            f"INSERT INTO asynctask_process ({process_columns}) VALUES (:identity, '{{}}', 0, :beat, "
            f":quiet, 0, 0, {now} + :ttl, '{{}}') ON CONFLICT (identity) DO UPDATE SET "
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
        self.held = text("SELECT id, queue, payload FROM asynctask_job WHERE locked_by = :me")

        self.cancel = text(
            "INSERT INTO asynctask_cancelled_task (task_id, at) VALUES (:task_id, :at) "
            "ON CONFLICT (task_id) DO NOTHING"
        )
        self.cancelled = text("SELECT task_id FROM asynctask_cancelled_task")
        self.is_cancelled = text("SELECT 1 FROM asynctask_cancelled_task WHERE task_id = :task_id")

        if pg:
            self.next_seqs = text("SELECT nextval('asynctask_tracking_seq') FROM generate_series(1, :n)")
            self.position = text(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM asynctask_tracking_seq"
            )
            self.notify: TextClause | None = text(
                f"SELECT pg_notify('{CHANNEL}', q) FROM unnest(CAST(:queues AS TEXT[])) AS q"
            )
        else:
            self.next_seqs = text(
                "INSERT INTO asynctask_counter (name, value) VALUES ('tracking_seq', :n) "
                "ON CONFLICT (name) DO UPDATE SET value = asynctask_counter.value + excluded.value "
                "RETURNING value"
            )
            self.position = text("SELECT value FROM asynctask_counter WHERE name = 'tracking_seq'")
            self.notify = None

        self.ping = text("SELECT 1")

    def ids(self, values: Sequence[int | str]) -> Any:
        """The ``:ids`` parameter: an array on PostgreSQL, JSON text for SQLite's json_each."""
        numbers = [int(v) for v in values]
        return numbers if self.postgres else json.dumps(numbers)

    def claim(self, queues: int) -> TextClause:
        """Acknowledge and claim in one statement on PostgreSQL; claim on SQLite.

        Up to ``:wanted`` claimable jobs, the queues tried in the order given (``:queues`` on
        PostgreSQL, ``:q0``, ``:q1``... on SQLite), each queue by (priority, id). Returns the
        rows claimed in no particular order (RETURNING has none); on PostgreSQL one more row,
        whose id is NULL, carries the cancellation generation.
        """
        if self.postgres:
            return text(
                "WITH acked AS (DELETE FROM asynctask_job WHERE id = ANY(CAST(:ids AS BIGINT[])) "
                f"AND locked_by = :me), {_picked_and_claimed()} "
                f"SELECT NULL, ({GENERATION}), NULL, NULL "
                "UNION ALL SELECT id, queue, priority, payload FROM claimed"
            )
        # No SKIP LOCKED needed: the write lock serialises claimers.
        heads = [
            f"SELECT id, priority, {i} AS pos FROM (SELECT id, priority FROM asynctask_job "
            f"WHERE queue = :q{i} AND {CLAIMABLE} ORDER BY priority, id LIMIT :wanted)"
            for i in range(queues)
        ]
        return text(
            "UPDATE asynctask_job SET locked_by = :me, locked_at = :now, attempts = attempts + 1 "
            f"WHERE id IN (SELECT id FROM ({' UNION ALL '.join(heads)}) ORDER BY pos, priority, id "
            f"LIMIT :wanted) RETURNING id, queue, priority, {STORED_PAYLOAD}"
        )

    def keyed_claim(self) -> TextClause | None:
        """PostgreSQL's ``claim`` when acknowledged jobs hold slots of concurrency keys: it
        also promotes the next waiting jobs of their keys. Run after the statement that locks
        those keys (``flow.lanes_of``), so that its snapshot sees every push committed before.

        Every part of one statement sees the same snapshot, where the rows it deletes still
        hold their slots: a key's free slots are its limit less its holders less the rows of
        the key this statement deletes. A promoted job of a queue this process fetches is
        claimed by it at once, as the first of the ``:wanted`` jobs (the rest come from the
        queues as usual), unless a claimable job of its queue has a higher priority: a
        promotion is then one row change, as a plain job's claim is, instead of two. A
        promoted job of another queue is left queued and its queue NOTIFYed (the third column
        of the generation row counts those queues). None on SQLite, which runs its statements
        one by one.
        """
        if not self.postgres:
            return None
        lines = f"""SELECT w.id, w.queue, w.priority FROM (SELECT lane, count(*) FILTER (WHERE holds)
            AS ended FROM acked WHERE lane IS NOT NULL GROUP BY lane) AS e CROSS JOIN LATERAL (SELECT id,
            queue, priority FROM asynctask_job WHERE lane = e.lane AND state = '{LANE}'
            ORDER BY priority, run_at, id
            LIMIT GREATEST(0, COALESCE((SELECT lim FROM asynctask_lane WHERE digest = e.lane), 0)
            - (SELECT count(*) FROM asynctask_job WHERE lane = e.lane AND holds) + e.ended)) AS w"""
        # Taken here only if no claimable job of its queue comes before it by priority: a
        # promotion must not jump a more urgent job.
        head = (
            "(SELECT h.priority FROM asynctask_job AS h WHERE h.queue = w.queue AND "
            f"h.{CLAIMABLE.replace(' AND locked_by', ' AND h.locked_by')} ORDER BY h.priority LIMIT 1)"
        )
        take = f"w.queue = ANY(CAST(:queues AS TEXT[])) AND w.priority <= COALESCE({head}, w.priority)"
        taken = "(SELECT count(*) FROM promoted WHERE locked_by IS NOT NULL)"
        return text(
            "WITH acked AS (DELETE FROM asynctask_job WHERE id = ANY(CAST(:ids AS BIGINT[])) "
            "AND locked_by = :me RETURNING lane, holds), "
            "promoted AS (UPDATE asynctask_job AS p SET state = 'queued', holds = TRUE, run_at = :now, "
            "locked_by = CASE WHEN c.take THEN :me END, locked_at = CASE WHEN c.take THEN :now END, "
            "attempts = p.attempts + CASE WHEN c.take THEN 1 ELSE 0 END "
            f"FROM (SELECT w.id, {take} AS take FROM ({lines}) AS w) AS c WHERE p.id = c.id "
            "RETURNING p.id, p.queue, p.priority, p.payload, p.locked_by), "
            f"{_picked_and_claimed(f'GREATEST(0, :wanted - {taken})')} "
            f"SELECT NULL, ({GENERATION}), (SELECT count(pg_notify('{CHANNEL}', q)) "
            "FROM (SELECT DISTINCT queue AS q FROM promoted WHERE locked_by IS NULL) AS n), NULL "
            "UNION ALL SELECT id, queue, priority, payload FROM claimed "
            "UNION ALL SELECT id, queue, priority, payload FROM promoted WHERE locked_by IS NOT NULL"
        )

    def has_work(self, queues: int) -> TextClause:
        """Whether any of ``:q0``, ``:q1``... has a claimable job (SQLite's idle poll: a read,
        which never waits for the write lock)."""
        return text(_has_work(queues))

    def idle_claim(self, queues: int) -> TextClause:
        """The cancellation generation, and whether any of ``:q0``, ``:q1``... has a
        claimable job: what an idle SQLite claim reads before it takes the write lock."""
        return text(f"SELECT ({GENERATION}), EXISTS({_has_work(queues)})")


def _picked_and_claimed(wanted: str = ":wanted") -> str:
    """PostgreSQL's claim of ``wanted`` jobs, as the CTEs ``picked`` and ``claimed``
    (``RETURNING`` id, queue, priority, payload). SKIP LOCKED: concurrent claimers each take
    different rows instead of queueing behind one another's locks."""
    return (
        "picked AS (SELECT j.id FROM unnest(CAST(:queues AS TEXT[])) WITH ORDINALITY AS q(name, pos) "
        "CROSS JOIN LATERAL (SELECT id, priority FROM asynctask_job "
        f"WHERE queue = q.name AND {CLAIMABLE} ORDER BY priority, id LIMIT {wanted} "
        f"FOR UPDATE SKIP LOCKED) AS j ORDER BY q.pos, j.priority, j.id LIMIT {wanted}), "
        "claimed AS (UPDATE asynctask_job AS t SET locked_by = :me, locked_at = :now, "
        "attempts = t.attempts + 1 FROM picked WHERE t.id = picked.id "
        "RETURNING t.id, t.queue, t.priority, t.payload)"
    )


def _has_work(queues: int) -> str:
    names = ", ".join(f":q{i}" for i in range(queues))
    return f"SELECT 1 FROM asynctask_job WHERE queue IN ({names}) AND {CLAIMABLE} LIMIT 1"
