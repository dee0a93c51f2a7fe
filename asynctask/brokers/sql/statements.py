"""Every statement of the SQL broker, built once per dialect (SQLite or PostgreSQL).

Predicates that select claimable rows (``state = 'queued' AND locked_by IS NULL``) and set
rows (``state <> 'queued'``) are spelled as literals, exactly as the partial indexes of
``models`` define them: SQLite and PostgreSQL use a partial index only when they can see
that a query implies its predicate, which a bound parameter hides.

Times a process's liveness is judged by (``expires_at``) come from PostgreSQL's clock there,
so that hosts with skewed clocks agree on who is dead, as Redis's TTLs make them agree;
SQLite is one file on one host, whose clock the ``:now`` parameter carries.

The claims depend on which of the queues, in the order tried, are served fairly
(docs/internals/fair-share-sql.md); each combination's statement is built once, when first
used. A claim that serves no queue fairly is the push-order claim, whatever the combination.

Every claim leaves the paused queues alone (``asynctask_paused_queue``): a queue is looked up
there by its name, once per claim, before any of its rows is read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

from sqlalchemy import TextClause, text

from asynctask.brokers.sql.feed_statements import FeedStatements
from asynctask.brokers.sql.flow_statements import FlowStatements
from asynctask.brokers.sql.models import LANE, PLAIN_SHARE

#: The channel NOTIFY announces new jobs on; the payload is the queue's name.
CHANNEL = "asynctask_jobs"

#: Claimable rows: the predicate of the index ``ix_asynctask_job_fetch``.
CLAIMABLE = "state = 'queued' AND locked_by IS NULL"
#: A fair queue's claimable rows of tasks, and those outside any task: the predicates of the
#: indexes ``ix_asynctask_job_turn`` and ``ix_asynctask_job_plain``.
TAGGED = f"{CLAIMABLE} AND turn IS NOT NULL"
PLAIN = f"{CLAIMABLE} AND turn IS NULL"
#: Rows of this process, among rows found by id. Spelled so that no index can serve it: the
#: index of claimed rows keeps an entry for every row the process claimed until a vacuum (a
#: bitmap scan never marks one dead), and PostgreSQL, intersecting it with the ids, would read
#: them all at every acknowledgement.
MINE = "(locked_by = :me) IS TRUE"
#: The order of each kind's index: a LIMIT read in it is a read of the index's head.
TAGGED_ORDER = "priority, turn, id"
PLAIN_ORDER = "priority, id"
#: The queue ``{}`` (a name or a parameter) is not paused: one primary-key probe.
NOT_PAUSED = "NOT EXISTS (SELECT 1 FROM asynctask_paused_queue WHERE asynctask_paused_queue.queue = {})"

#: The job sets (scheduled, retry, dead): the predicate of the index ``ix_asynctask_job_set``.
IN_A_SET = "state <> 'queued'"

#: The cancellation generation: it changes whenever a task is cancelled (cancellations are
#: never removed, and a new one adds a row).
GENERATION = "SELECT count(*) || ':' || coalesce(max(at), 0) FROM asynctask_cancelled_task"

JOB_COLUMNS = ("jid", "queue", "state", "priority", "run_at", "payload", "last_error", "lane", "holds")

#: Whether each queue of a claim, in the order tried, is served fairly.
Fairness: TypeAlias = tuple[bool, ...]
#: Which of a fair queue's claimable rows a PostgreSQL claim reads: both kinds (a task's
#: tagged rows and the plain rows outside tasks), or one kind only, when the claim before
#: saw none of the other waiting: a queue of tasks alone, or of plain jobs alone, is then
#: claimed by one LIMIT read, as a FIFO queue is (``_kinds_waiting``).
Mix: TypeAlias = Literal["both", "tagged", "plain"]
#: The bits of the kinds a claim saw waiting, in its generation row (``_kinds_waiting``).
TAGGED_WAITING, PLAIN_WAITING = 1, 2

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
            # One statement whatever the batch: the rows travel as one JSON array of arrays,
            # written by json.dumps in C. Bound as typed arrays, psycopg wrote each text element
            # in Python, escaping it with a regular expression: a 1,000-job insert took 39 ms
            # instead of 25. JSONB: parsed once, where JSON's ->> parses each row per field.
            kinds = ("TEXT", "TEXT", "TEXT", "INTEGER", "DOUBLE PRECISION", "TEXT", "TEXT", "TEXT", "BOOLEAN")

            def insert(extra: tuple[tuple[str, str], ...]) -> TextClause:
                columns = tuple(zip(JOB_COLUMNS, kinds, strict=True)) + extra
                names = ", ".join(name for name, _ in columns)
                fields = ", ".join(f"CAST(r->>{i} AS {kind})" for i, (_, kind) in enumerate(columns))
                return text(
                    f"INSERT INTO asynctask_job ({names}, attempts) "
                    f"SELECT {fields}, 0 FROM jsonb_array_elements(CAST(:rows AS JSONB)) AS r"
                )

            self.insert_jobs = insert(())
            # A task's jobs, with their turns, and fed jobs, with their feed (and turns, NULL
            # for a task's retry pushed to its feed): statements of their own, so that every
            # other insert carries no column more.
            self.insert_task_jobs = insert((("turn", "BIGINT"),))
            self.insert_fed_jobs = insert((("feed", "TEXT"), ("turn", "BIGINT")))
        else:
            # Run as executemany: SQLite has no round trips to save.
            self.insert_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, 0)"
            )
            self.insert_task_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, turn, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, :turn, 0)"
            )
            self.insert_fed_jobs = text(
                f"INSERT INTO asynctask_job ({', '.join(JOB_COLUMNS)}, feed, turn, attempts) "
                f"VALUES ({', '.join(':' + c for c in JOB_COLUMNS)}, :feed, :turn, 0)"
            )

        # A task's turns (fair-share-sql.md, Tags). The head turn, or once no tagged job
        # waits, the largest turn a tenant reached: a tenant whose jobs all ran must not find
        # its next task behind a newcomer's, as it would if turns started again from 0.
        self.start_turn = text(
            f"SELECT COALESCE(({_first('turn', ':queue', TAGGED, TAGGED_ORDER)}), "
            "(SELECT max(last_turn) FROM asynctask_share WHERE queue = :queue), 0)"
        )
        # The row's lock orders a tenant's concurrent tasks: the later one starts after the
        # earlier one's last turn, which it reads once the earlier one committed.
        # The parameters are cast: psycopg sends a small integer as a smallint, whose sum with
        # another would overflow at 32,767 instead of being the BIGINT of the column.
        start, n = ("CAST(:start AS BIGINT)", "CAST(:n AS BIGINT)") if pg else (":start", ":n")
        self.take_turns = text(
            f"INSERT INTO asynctask_share (queue, share, last_turn) VALUES (:queue, :share, {start} + {n}) "
            f"ON CONFLICT (queue, share) DO UPDATE SET last_turn = {'GREATEST' if pg else 'max'}("
            f"asynctask_share.last_turn, {start}) + {n} RETURNING last_turn"
        )
        # A rolled-back task's turns, given back unless a later task of its tenant took turns after them.
        self.give_back_turns = text(
            f"UPDATE asynctask_share SET last_turn = {start} "
            f"WHERE queue = :queue AND share = :share AND last_turn = {start} + {n}"
        )

        # A task's place (``SqlBroker.jobs_ahead``), each part one index probe: the head's turn,
        # how many shares have a job in the head's round, and whether plain jobs wait.
        head = _first("priority, turn", ":queue", TAGGED, TAGGED_ORDER)
        self.ahead_in_turns = text(
            f"WITH h AS ({head}) SELECT (SELECT turn FROM h), "
            f"(SELECT count(*) FROM asynctask_job WHERE queue = :queue AND {TAGGED} "
            "AND priority = (SELECT priority FROM h) AND turn = (SELECT turn FROM h)), "
            f"EXISTS (SELECT 1 FROM asynctask_job WHERE queue = :queue AND {PLAIN})"
        )
        self.ahead_in_order = text(
            "SELECT count(*) FROM (SELECT 1 FROM asynctask_job "
            f"WHERE queue = :queue AND {CLAIMABLE} LIMIT :bound) AS w"
        )

        self.ack = text(f"DELETE FROM asynctask_job WHERE {ids} AND {MINE}")
        self.unlock = text(
            f"UPDATE asynctask_job SET locked_by = NULL, locked_at = NULL WHERE {ids} AND {MINE}"
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

        # The round the plain share was last served in, plus one (``_fair_candidates``).
        self.plain_served = text(
            f"INSERT INTO asynctask_share (queue, share, last_turn) VALUES (:queue, '{PLAIN_SHARE}', :next) "
            "ON CONFLICT (queue, share) DO UPDATE SET last_turn = excluded.last_turn"
        )
        self.ping = text("SELECT 1")
        self._claims: dict[tuple[Fairness, int, Mix], TextClause] = {}
        self._keyed_claims: dict[tuple[Fairness, int, Mix], TextClause | None] = {}

    def ids(self, values: Sequence[int | str]) -> Any:
        """The ``:ids`` parameter: an array on PostgreSQL, JSON text for SQLite's json_each."""
        numbers = [int(v) for v in values]
        return numbers if self.postgres else json.dumps(numbers)

    def claim(self, fair: Fairness, wanted: int, mix: Mix = "both") -> TextClause:
        """Acknowledge and claim in one statement on PostgreSQL; claim on SQLite.

        Up to ``:wanted`` claimable jobs, the queues tried in the order given (``:queues`` on
        PostgreSQL, ``:q0``, ``:q1``... on SQLite), ``fair`` telling for each whether it is
        served fairly: a queue served in push order by (priority, id), a fair one in turns
        (``_fair_candidates``). Returns the rows claimed in no particular order (RETURNING has
        none), with their turns when a queue is fair; on PostgreSQL one more row, whose id is
        NULL, carries the cancellation generation and, if a queue is fair, in its fifth column
        the kinds of rows seen waiting (``_kinds_waiting``). ``mix``: PostgreSQL's kinds of
        rows read in the fair queues; SQLite reads both.
        """
        key = (fair, wanted if self.postgres else 0, mix if self.postgres else "both")
        found = self._claims.get(key)
        if found is None:
            found = self._claims[key] = (
                _limited(self._claim(fair, mix), wanted) if self.postgres else self._claim(fair)
            )
        return found

    def _claim(self, fair: Fairness, mix: Mix = "both") -> TextClause:
        turns = any(fair)
        if self.postgres:
            waiting = f", {_kinds_waiting(fair, mix)}, NULL, NULL" if turns else ""
            return text(
                "WITH acked AS (DELETE FROM asynctask_job WHERE id = ANY(CAST(:ids AS BIGINT[])) "
                f"AND {MINE}), {_picked_and_claimed(fair=fair, mix=mix)} "
                f"SELECT NULL, ({GENERATION}), NULL, NULL{waiting} "
                f"UNION ALL SELECT id, queue, priority, payload{', turn, key, headed' if turns else ''} "
                "FROM claimed"
            )
        # No SKIP LOCKED needed: the write lock serialises claimers.
        if not turns:
            heads = [
                f"SELECT id, priority, {i} AS pos FROM (SELECT id, priority FROM asynctask_job "
                f"WHERE queue = :q{i} AND {CLAIMABLE} AND {NOT_PAUSED.format(f':q{i}')} "
                "ORDER BY priority, id LIMIT :wanted)"
                for i in range(len(fair))
            ]
            return text(
                "UPDATE asynctask_job SET locked_by = :me, locked_at = :now, attempts = attempts + 1 "
                f"WHERE id IN (SELECT id FROM ({' UNION ALL '.join(heads)}) ORDER BY pos, priority, id "
                f"LIMIT :wanted) RETURNING id, queue, priority, {STORED_PAYLOAD}"
            )
        heads = [
            f"SELECT id, priority, key, tagged, headed, {i} AS pos "
            f"FROM ({_fair_candidates(f':q{i}', ':wanted', only_if=NOT_PAUSED.format(f':q{i}'))})"
            if is_fair
            else f"SELECT id, priority, 0 AS key, 0 AS tagged, 0 AS headed, {i} AS pos FROM (SELECT id, "
            f"priority FROM asynctask_job WHERE queue = :q{i} AND {CLAIMABLE} "
            f"AND {NOT_PAUSED.format(f':q{i}')} ORDER BY priority, id LIMIT :wanted)"
            for i, is_fair in enumerate(fair)
        ]
        # The keys the rows were claimed by are returned too: read from the picked rows, which
        # SQLite materializes once, before the update changes what they were read from.
        picked = "(SELECT {} FROM picked WHERE picked.id = asynctask_job.id)"
        return text(
            "WITH picked AS MATERIALIZED (SELECT id, key, headed FROM "
            f"({' UNION ALL '.join(heads)}) ORDER BY pos, priority, key, tagged, id LIMIT :wanted) "
            "UPDATE asynctask_job SET locked_by = :me, locked_at = :now, attempts = attempts + 1 "
            f"WHERE id IN (SELECT id FROM picked) RETURNING id, queue, priority, {STORED_PAYLOAD}, turn, "
            f"{picked.format('key')}, {picked.format('headed')}"
        )

    def keyed_claim(self, fair: Fairness, wanted: int, mix: Mix = "both") -> TextClause | None:
        """``_keyed_claim``, built once per ``fair``, ``wanted`` and ``mix`` (see ``claim``)."""
        key = (fair, wanted, mix)
        if key not in self._keyed_claims:
            built = self._keyed_claim(fair, mix)
            self._keyed_claims[key] = None if built is None else _limited(built, wanted)
        return self._keyed_claims[key]

    def _keyed_claim(self, fair: Fairness, mix: Mix = "both") -> TextClause | None:
        """PostgreSQL's ``claim`` when acknowledged jobs hold slots of concurrency keys: it
        also promotes the next waiting jobs of their keys. Run after the statement that locks
        those keys (``flow.lanes_of``), so that its snapshot sees every push committed before.

        Every part of one statement sees the same snapshot, where the rows it deletes still
        hold their slots: a key's free slots are its limit less its holders less the rows of
        the key this statement deletes. A promoted job of a queue this process fetches is
        claimed by it at once, as the first of the ``:wanted`` jobs (the rest come from the
        queues as usual), unless a claimable job of its queue has a higher priority: a
        promotion is then one row change, as a plain job's claim is, instead of two (in a fair
        queue too: the promoted job's turn is not compared with the head's). A promoted job of
        another queue is left queued and its queue NOTIFYed (the third column
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
        take = (
            f"w.queue = ANY(CAST(:queues AS TEXT[])) AND {NOT_PAUSED.format('w.queue')} "
            f"AND w.priority <= COALESCE({head}, w.priority)"
        )
        taken = "(SELECT count(*) FROM promoted WHERE locked_by IS NOT NULL)"
        turn = ", turn" if any(fair) else ""
        # A promoted row's key is its turn; it never moves the plain share's round.
        promoted_turn = ", turn, turn, FALSE" if turn else ""
        return text(
            "WITH acked AS (DELETE FROM asynctask_job WHERE id = ANY(CAST(:ids AS BIGINT[])) "
            f"AND {MINE} RETURNING lane, holds), "
            "promoted AS (UPDATE asynctask_job AS p SET state = 'queued', holds = TRUE, run_at = :now, "
            "locked_by = CASE WHEN c.take THEN :me END, locked_at = CASE WHEN c.take THEN :now END, "
            "attempts = p.attempts + CASE WHEN c.take THEN 1 ELSE 0 END "
            f"FROM (SELECT w.id, {take} AS take FROM ({lines}) AS w) AS c WHERE p.id = c.id "
            f"RETURNING p.id, p.queue, p.priority, p.payload, p.locked_by{turn}), "
            f"{_picked_and_claimed(f'GREATEST(0, :wanted - {taken})', fair, mix)} "
            f"SELECT NULL, ({GENERATION}), (SELECT count(pg_notify('{CHANNEL}', q)) "
            f"FROM (SELECT DISTINCT queue AS q FROM promoted WHERE locked_by IS NULL) AS n), NULL"
            f"{f', {_kinds_waiting(fair, mix)}, NULL, NULL' if turn else ''} "
            f"UNION ALL SELECT id, queue, priority, payload{', turn, key, headed' if turn else ''} "
            "FROM claimed "
            f"UNION ALL SELECT id, queue, priority, payload{promoted_turn} FROM promoted "
            "WHERE locked_by IS NOT NULL"
        )

    def has_work(self, queues: int) -> TextClause:
        """Whether any of ``:q0``, ``:q1``... has a claimable job (SQLite's idle poll: a read,
        which never waits for the write lock)."""
        return text(_has_work(queues))

    def idle_claim(self, queues: int) -> TextClause:
        """The cancellation generation, and whether any of ``:q0``, ``:q1``... has a
        claimable job: what an idle SQLite claim reads before it takes the write lock."""
        return text(f"SELECT ({GENERATION}), EXISTS({_has_work(queues)})")


def _limited(claim: TextClause, wanted: int) -> TextClause:
    """PostgreSQL's claim with the number of jobs wanted written in: a prepared statement whose
    LIMIT is a parameter gets a poor generic plan, so PostgreSQL planned every claim anew,
    which took longer than running it (about 1 ms against 0.5 ms for a fair claim); with the
    number written in, a connection's prepared claim keeps its plan. One statement per number
    of threads that can wait at once."""
    return text(claim.text.replace(":wanted", str(int(wanted))))


def _served(alias: str) -> str:
    """PostgreSQL: the claim's queues (``:queues``) that are not paused, as ``alias(name, pos)``,
    pos counting every queue (the fair ones' positions stay those of ``_fair_positions``). Only
    the queues left are read: the lateral reads of their rows come after this filter."""
    return (
        "(SELECT name, pos FROM unnest(CAST(:queues AS TEXT[])) WITH ORDINALITY AS u(name, pos) "
        f"WHERE {NOT_PAUSED.format('u.name')}) AS {alias}"
    )


def _picked_and_claimed(wanted: str = ":wanted", fair: Fairness = (), mix: Mix = "both") -> str:
    """PostgreSQL's claim of ``wanted`` jobs, as the CTEs ``picked`` and ``claimed``
    (``RETURNING`` id, queue, priority, payload, and turn if a queue is fair). SKIP LOCKED:
    concurrent claimers each take different rows instead of queueing behind one another's
    locks."""
    locked = " FOR UPDATE SKIP LOCKED"
    if not any(fair):
        return (
            f"picked AS (SELECT j.id FROM {_served('q')} "
            "CROSS JOIN LATERAL (SELECT id, priority FROM asynctask_job "
            f"WHERE queue = q.name AND {CLAIMABLE} ORDER BY priority, id LIMIT {wanted}"
            f"{locked}) AS j ORDER BY q.pos, j.priority, j.id LIMIT {wanted}), "
            "claimed AS (UPDATE asynctask_job AS t SET locked_by = :me, locked_at = :now, "
            "attempts = t.attempts + 1 FROM picked WHERE t.id = picked.id "
            "RETURNING t.id, t.queue, t.priority, t.payload)"
        )
    if all(fair):
        candidates = _fair_candidates("q.name", wanted, locked, mix=mix)
        per_queue = f"SELECT id, priority, key, tagged, headed FROM ({candidates}) AS f"
    else:
        # Each queue runs the branch of its kind: the other's condition on the queue's
        # position is a constant for the scan, which PostgreSQL tests before reading (or
        # locking) anything.
        positions = _fair_positions(fair)
        candidates = _fair_candidates("q.name", wanted, locked, f"q.pos IN ({positions})", mix)
        per_queue = (
            f"SELECT id, priority, key, tagged, headed FROM ({candidates}) AS f "
            "UNION ALL SELECT id, priority, 0, FALSE, FALSE FROM (SELECT id, priority FROM asynctask_job "
            f"WHERE queue = q.name AND {CLAIMABLE} AND q.pos NOT IN ({positions}) "
            f"ORDER BY priority, id LIMIT {wanted}{locked}) AS o"
        )
    return (
        f"picked AS (SELECT j.id, j.key, j.headed FROM {_served('q')} CROSS JOIN LATERAL ({per_queue}) AS j "
        f"ORDER BY q.pos, j.priority, j.key, j.tagged, j.id LIMIT {wanted}), "
        "claimed AS (UPDATE asynctask_job AS t SET locked_by = :me, locked_at = :now, "
        "attempts = t.attempts + 1 FROM picked WHERE t.id = picked.id "
        "RETURNING t.id, t.queue, t.priority, t.payload, t.turn, picked.key, picked.headed)"
    )


def _kinds_waiting(fair: Fairness, mix: Mix) -> str:
    """PostgreSQL: the kinds of claimable rows waiting in the claim's fair queues, as the bits
    ``TAGGED_WAITING`` and ``PLAIN_WAITING``: a kind the claim reads counts as waiting; one
    it leaves out is looked for (an index head of its partial index per queue), so that the
    next claim reads it again as soon as one comes. Rows this very claim takes still count
    (its snapshot is from before): a kind may be read by one claim more than needed."""
    names = _served("f")

    def seen(rows: str, order: str) -> str:
        # A LATERAL in index order with LIMIT 1, not EXISTS: PostgreSQL may read an EXISTS, or
        # an unordered LIMIT 1, from the table itself, whose front a draining queue leaves
        # full of dead rows; this stays the head of the kind's index, per queue.
        return (
            f"(SELECT count(*) FROM (SELECT 1 FROM {names} CROSS JOIN LATERAL "
            f"({_first('1', 'f.name', rows, order)}) AS h WHERE f.pos IN ({_fair_positions(fair)}) "
            "LIMIT 1) AS w)"
        )

    tagged = str(TAGGED_WAITING) if mix == "tagged" else f"{TAGGED_WAITING} * {seen(TAGGED, TAGGED_ORDER)}"
    plain = str(PLAIN_WAITING) if mix == "plain" else f"{PLAIN_WAITING} * {seen(PLAIN, PLAIN_ORDER)}"
    return f"{tagged} + {plain}"


def _fair_candidates(queue: str, wanted: str, locked: str = "", only_if: str = "", mix: Mix = "both") -> str:
    """A fair queue's claim candidates (columns id, priority, turn, key, tagged, headed), to
    be claimed by (priority, key, tagged, id): up to ``wanted`` tagged rows, whose key is their
    turn, and up to ``wanted`` plain rows, the k-th of which takes the key V + k - 1, V being
    the head's turn (the queue's first claimable tagged row's; 0 if none), or V + k if the
    plain share was served in round V already (its ``Share`` row, written by the fetcher): one
    plain job per round, starting with the round being served. ``headed``: a tagged row waits,
    so a plain row taken moves the plain share's round. Each kind is a LIMIT read of its own
    index; the head and the plain share's round are read only when plain rows were found.
    ``only_if``: a condition that does not depend on the rows (PostgreSQL's gate by the
    queue's position). ``mix``: read one kind only (tagged rows keep their keys; plain rows,
    alone, are taken in push order and move no round)."""
    gate = f" AND {only_if}" if only_if else ""
    tagged_rows = _first("id, priority, turn", queue, TAGGED, TAGGED_ORDER, wanted, gate, locked)
    plain_rows = _first("id, priority", queue, PLAIN, PLAIN_ORDER, wanted, gate, locked)
    tagged = (
        f"SELECT id, priority, turn, turn AS key, 1 = 1 AS tagged, 1 = 1 AS headed FROM ({tagged_rows}) AS t"
    )
    if mix == "tagged":
        return tagged
    if mix == "plain":
        plain = "SELECT id, priority, NULL AS turn, 0 AS key, 1 = 0 AS tagged, 1 = 0 AS headed"
        return f"{plain} FROM ({plain_rows}) AS p"
    # Not locked: on PostgreSQL the head may be a row another claimer is taking at this very
    # moment, which makes V at most one batch's turns early for this claim's plain rows.
    head = f"({_first('turn', queue, TAGGED, TAGGED_ORDER)})"
    plain_round = f"(SELECT last_turn FROM asynctask_share WHERE queue = {queue} AND share = '{PLAIN_SHARE}')"
    # A plain round further on than V + 1 is from before the head went back (a retried
    # row's older turn): the plain share then waits one round, not all the rounds between.
    base = "COALESCE(head, 0) + CASE WHEN COALESCE(plain_round, 0) > COALESCE(head, 0) THEN 1 ELSE 0 END"
    return (
        f"{tagged} UNION ALL "
        f"SELECT id, priority, NULL, {base} + plain_rank - 1, 1 = 0, head IS NOT NULL FROM ("
        f"SELECT id, priority, row_number() OVER (ORDER BY {PLAIN_ORDER}) AS plain_rank, {head} AS head, "
        f"{plain_round} AS plain_round FROM ({plain_rows}) AS p) AS r"
    )


def _first(
    columns: str, queue: str, rows: str, order: str, limit: str = "1", gate: str = "", locked: str = ""
) -> str:
    """The first ``limit`` rows of one kind of ``queue`` (``rows``: ``TAGGED`` or ``PLAIN``;
    ``order``: its index's order), a read of the head of the kind's index; ``gate``: a further
    condition (`` AND ...``), ``locked``: a row lock clause."""
    return (
        f"SELECT {columns} FROM asynctask_job WHERE queue = {queue} AND {rows}{gate} "
        f"ORDER BY {order} LIMIT {limit}{locked}"
    )


def _fair_positions(fair: Fairness) -> str:
    """The 1-based positions, in ``:queues``, of a claim's fair queues."""
    return ", ".join(str(i + 1) for i, is_fair in enumerate(fair) if is_fair)


def _has_work(queues: int) -> str:
    names = ", ".join(f":q{i}" for i in range(queues))
    return (
        f"SELECT 1 FROM asynctask_job WHERE queue IN ({names}) AND {CLAIMABLE} "
        f"AND {NOT_PAUSED.format('asynctask_job.queue')} LIMIT 1"
    )
