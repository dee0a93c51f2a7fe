"""The core statements of the SQL broker, built once per dialect (SQLite or PostgreSQL), by
family: the claims and what a claimer does with its rows here; pushes in ``push_statements``,
the job sets in ``set_statements``, worker processes in ``process_statements``; what they share
in ``predicates``. A feature's statements live in its module: ``flow.FlowStatements``,
``feeds.FeedStatements``.

The claims depend on which of the queues, in the order tried, are served fairly
(docs/internals/fair-share-sql.md); each combination's statement is built once, when first
used. A claim that serves no queue fairly is the push-order claim, whatever the combination.

Every claim leaves the paused queues alone (``asynctask_paused_queue``): a queue is looked up
there by its name, once per claim, before any of its rows is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import TextClause, text

from asynctask.brokers.sql.models import LANE, PLAIN_SHARE
from asynctask.brokers.sql.predicates import (
    CHANNEL,
    CLAIMABLE,
    GENERATION,
    MINE,
    NOT_PAUSED,
    PLAIN,
    PLAIN_ORDER,
    PLAIN_WAITING,
    STORED_PAYLOAD,
    TAGGED,
    TAGGED_ORDER,
    TAGGED_WAITING,
    Fairness,
    Mix,
    first_rows,
    ids_of,
    ids_value,
    now_of,
)
from asynctask.brokers.sql.process_statements import ProcessStatements
from asynctask.brokers.sql.push_statements import PushStatements
from asynctask.brokers.sql.set_statements import SetStatements


class Statements:
    def __init__(self, dialect: str) -> None:
        if dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"the SQL broker supports SQLite and PostgreSQL, not {dialect}")
        self.postgres = dialect == "postgresql"
        pg = self.postgres
        ids = ids_of(pg)
        #: "Now" as liveness is judged (for the read API's queries of processes).
        self.expiry_now = now_of(pg)
        self.push = PushStatements(pg)
        self.sets = SetStatements(pg)
        self.processes = ProcessStatements(pg)

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
        self._claims: dict[tuple[Fairness, int, Mix], TextClause] = {}
        self._keyed_claims: dict[tuple[Fairness, int, Mix], TextClause | None] = {}

    def ids(self, values: Sequence[int | str]) -> Any:
        """The ``:ids`` parameter (``ids_value``) in this dialect."""
        return ids_value(values, self.postgres)

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
        those keys (``FlowStatements.lanes_of``), so that its snapshot sees every push committed before.

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
            f"({first_rows('1', 'f.name', rows, order)}) AS h WHERE f.pos IN ({_fair_positions(fair)}) "
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
    tagged_rows = first_rows("id, priority, turn", queue, TAGGED, TAGGED_ORDER, wanted, gate, locked)
    plain_rows = first_rows("id, priority", queue, PLAIN, PLAIN_ORDER, wanted, gate, locked)
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
    head = f"({first_rows('turn', queue, TAGGED, TAGGED_ORDER)})"
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


def _fair_positions(fair: Fairness) -> str:
    """The 1-based positions, in ``:queues``, of a claim's fair queues."""
    return ", ".join(str(i + 1) for i, is_fair in enumerate(fair) if is_fair)


def _has_work(queues: int) -> str:
    names = ", ".join(f":q{i}" for i in range(queues))
    return (
        f"SELECT 1 FROM asynctask_job WHERE queue IN ({names}) AND {CLAIMABLE} "
        f"AND {NOT_PAUSED.format('asynctask_job.queue')} LIMIT 1"
    )
