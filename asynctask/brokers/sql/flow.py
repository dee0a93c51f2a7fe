"""Flow control in the SQL broker: concurrency keys' lines and slots, unique keys and rate
limits (docs/internals/flow-control-sql.md), in three parts: a job's flow-control fields as the
broker reads them, the statements (``FlowStatements``), and the steps a push, a claim, a job's
end and the safety sweep take (``Flow``).

The client writes the fields resolved and validated; a payload written by anyone else may hold
anything, so every reader here checks types and treats a field it cannot use as absent (the job
then runs without that control, and the runtime's own check buries what is invalid). Only
payloads that mention a flow key are decoded: an unkeyed job costs one substring test.

Every step runs inside the caller's write transaction, next to the job change it goes with, so
that a slot, a unique hold or a rate log entry changes exactly when the job does. Lock order
(PostgreSQL), the same everywhere so that no two transactions wait on each other in a cycle:
rate keys, unique keys, then concurrency keys, each kind by digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, TextClause, text

from asynctask import payload
from asynctask.brokers.sql.models import LANE, QUEUED
from asynctask.brokers.sql.predicates import ids_of, ids_value
from asynctask.brokers.sql.transactions import JobRow, Tx

#: Longest concurrency key (docs/guide/flow-control.md).
MAX_KEY = 1000
#: Substrings of a payload that may carry a flow field (a cheap test before decoding).
LANE_MARK = b'"concurrency_key"'
UNIQUE_MARK = b'"unique_key"'
RATE_MARK = b'"rate_limit"'
UNTIL_MARK = b'"unique_until"'
#: A rate limit's window by its unit.
WINDOWS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def digest(key: str) -> str:
    """A key's fixed-width name in the tables (any length, any characters)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def storable(key: str) -> str:
    """``key`` as a text column takes it (PostgreSQL refuses NUL; UTF-8 lone surrogates)."""
    if key.isascii() and "\x00" not in key:
        return key
    return key.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")


@dataclass(frozen=True, slots=True)
class LaneOf:
    key: str
    digest: str
    limit: int
    #: ``concurrency_on_failure="continue"``: a failed job frees its slot.
    free_on_failure: bool


@dataclass(frozen=True, slots=True)
class UniqueOf:
    key: str
    digest: str
    #: Seconds from push the key is held at most (a scheduled job's delay not included).
    ttl: float
    #: ``unique_until="start"``: released when claimed, not when the job ends.
    until_start: bool


@dataclass(frozen=True, slots=True)
class RateOf:
    key: str
    digest: str
    count: int
    window: float


def _is_int(value: Any) -> bool:
    return type(value) is int


def lane_of(job: payload.JobDict) -> LaneOf | None:
    key = job.get("concurrency_key")
    if type(key) is not str or not 1 <= len(key) <= MAX_KEY:
        return None
    limit = job.get("concurrency_limit", 1)
    limit = limit if _is_int(limit) and limit >= 1 else 1
    return LaneOf(key, digest(key), min(limit, 2**31 - 1), job.get("concurrency_on_failure") == "continue")


def unique_of(job: payload.JobDict) -> UniqueOf | None:
    key = job.get("unique_key")
    ttl = job.get("unique_for")
    if type(key) is not str or not key or not isinstance(ttl, int | float) or isinstance(ttl, bool):
        return None
    if not 0 < ttl < float("inf"):
        return None
    return UniqueOf(key, digest(key), float(ttl), job.get("unique_until") == "start")


def rate_of(job: payload.JobDict) -> RateOf | None:
    limit = job.get("rate_limit")
    if type(limit) is not str:
        return None
    count, _, unit = limit.partition("/")
    if unit not in WINDOWS or not count.isascii() or not count.isdigit() or int(count) < 1:
        return None
    key = job.get("rate_key", job.get("class"))
    if type(key) is not str or not key:
        return None
    return RateOf(key, digest(key), int(count), WINDOWS[unit])


def decoded(raw: bytes | str, *marks: bytes) -> payload.JobDict | None:
    """The job in ``raw`` if it mentions one of ``marks`` and is a JSON object, else None."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if not any(mark in data for mark in marks):
        return None
    try:
        job = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return job if isinstance(job, dict) else None


class FlowStatements:
    """The flow-control statements, built once per dialect."""

    def __init__(self, postgres: bool) -> None:
        pg = postgres
        greatest = "GREATEST" if pg else "max"
        in_ids = ids_of(pg)

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


#: Starts older than this are dropped from every rate log by the sweep (the longest window).
LONGEST_WINDOW = 3600.0


def is_flow(raw: bytes | str) -> bool:
    """Whether ending this job may free a slot or a unique key (a substring test only)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return LANE_MARK in data or UNIQUE_MARK in data


class Flow:
    def __init__(self, postgres: bool) -> None:
        self.statements = FlowStatements(postgres)
        self._postgres = postgres

    # Pushes.

    def admit(
        self, connection: Connection, entries: Sequence[tuple[payload.JobDict, JobRow]], now: float
    ) -> tuple[list[str], list[JobRow], list[str]]:
        """Take the jobs' unique keys and route keyed queued jobs into their lines, before the
        rows are inserted. Returns the jid the store holds for each entry (the holder's when
        its unique key was taken), the rows to insert, and the keys to promote from after."""
        stored = [str(job.get("jid", "")) for job, _ in entries]
        dropped: set[int] = set()
        uniques = sorted(
            (u.digest, i, u)
            for i, (job, _) in enumerate(entries)
            if "unique_key" in job and (u := unique_of(job)) is not None
        )
        holders: dict[str, str] = {}
        for key_digest, i, unique in uniques:
            _, row = entries[i]
            if key_digest in holders:
                stored[i] = holders[key_digest]
                dropped.add(i)
                continue
            # A scheduled job's hold lasts its delay longer.
            expires_at = now + unique.ttl + max(0.0, row[4] - now)
            taken = connection.execute(
                self.statements.take_unique,
                {
                    "digest": key_digest,
                    "key": storable(unique.key),
                    "jid": row[0],
                    "expires_at": expires_at,
                    "now": now,
                },
            ).scalar()
            if taken is None:
                holder = connection.execute(
                    self.statements.unique_holder, {"digest": key_digest}
                ).scalar_one()
                stored[i] = holders[key_digest] = str(holder)
                dropped.add(i)
            else:
                holders[key_digest] = row[0]
        rows: list[JobRow] = []
        lanes: dict[str, LaneOf] = {}
        #: The positions in ``rows`` of each key's queued jobs.
        keyed: dict[str, list[int]] = {}
        for i, (job, row) in enumerate(entries):
            if i in dropped:
                continue
            if row[7] is not None and row[2] == QUEUED:
                lane = lane_of(job)
                if lane is not None:
                    # The last pushed job's limit is the key's.
                    lanes[lane.digest] = lane
                    keyed.setdefault(lane.digest, []).append(len(rows))
            rows.append(row)
        self.take_lanes(connection, lanes.values())
        promote: list[str] = []
        # Counted under the keys' locks (see ``promote``). With nobody waiting, a key's first
        # jobs take its free slots at once, in push order; the others wait in the line.
        slots = {
            str(digest): (int(free), bool(waiting))
            for digest, free, waiting in connection.execute(
                self.statements.free_slots, {"digests": self._digests(list(keyed))}
            )
        }
        for lane_digest, positions in keyed.items():
            free, waiting = slots[lane_digest]
            runnable = 0 if waiting else max(0, free)
            if waiting and free > 0:
                promote.append(lane_digest)
            for rank, position in enumerate(sorted(positions, key=lambda p: rows[p][3])):
                state, holds = (QUEUED, True) if rank < runnable else (LANE, False)
                rows[position] = (*rows[position][:2], state, *rows[position][3:8], holds)
        return stored, rows, sorted(promote)

    def take_lanes(self, connection: Connection, lanes: Iterable[LaneOf]) -> None:
        """Lock the keys' rows (creating them), storing each one's limit."""
        ordered = sorted(lanes, key=lambda lane: lane.digest)
        if not ordered:
            return
        if self._postgres:
            params = {
                "digests": [lane.digest for lane in ordered],
                "keys": [storable(lane.key) for lane in ordered],
                "lims": [lane.limit for lane in ordered],
            }
            connection.execute(self.statements.lock_lane, params)
            return
        connection.execute(
            self.statements.lock_lane,
            [{"digest": lane.digest, "key": storable(lane.key), "lim": lane.limit} for lane in ordered],
        )

    def _digests(self, digests: list[str]) -> Any:
        """A ``:digests`` parameter: an array on PostgreSQL, JSON text for SQLite's json_each."""
        return digests if self._postgres else json.dumps(digests)

    # Ends of jobs.

    @contextmanager
    def ending(
        self, tx: Tx, ids: Sequence[int], raws: Sequence[bytes | str] = (), *, release_unique: bool = True
    ) -> Iterator[None]:
        """Around the statement that ends rows ``ids`` (deletes them, or moves them to a set
        without their slot): release the unique keys their jobs hold until done (``raws``: their
        payloads), lock their keys, then promote the next jobs of those keys."""
        connection = tx.connection
        digests = self.lock_ending(connection, ids, raws if release_unique else ())
        yield
        tx.announce(self.promote(connection, digests))

    def lock_ending(
        self, connection: Connection, ids: Sequence[int], raws: Sequence[bytes | str]
    ) -> list[str]:
        """Before rows ``ids`` end: release the unique keys their jobs (``raws``) hold until
        done, and lock the rows' keys; return the keys."""
        if raws:
            self.release_uniques(connection, [decoded(raw, UNIQUE_MARK) for raw in raws], at_start=False)
        return self.lanes_of(connection, ids)

    def lanes_of(self, connection: Connection, ids: Sequence[int]) -> list[str]:
        """The keys of rows ``ids``, locked."""
        if not ids:
            return []
        found = connection.execute(
            self.statements.lanes_of, {"ids": ids_value(ids, self._postgres)}
        ).scalars()
        return sorted(str(digest) for digest in found)

    def lock_lanes(self, connection: Connection, digests: Sequence[str]) -> None:
        """Lock existing keys' rows, in digest order (PostgreSQL; SQLite's writers are serial)."""
        if digests and self.statements.lock_lanes is not None:
            connection.execute(self.statements.lock_lanes, {"digests": sorted(digests)})

    def promote(self, connection: Connection, digests: Iterable[str], now: float | None = None) -> list[str]:
        """Move the next waiting jobs of each key into their queues, as many as it has free
        slots (hold the keys' locks); return their queues."""
        at = payload.now() if now is None else now
        keys = sorted(set(digests))
        if not keys:
            return []
        if self._postgres:
            return list(connection.execute(self.statements.promote, {"digests": keys, "now": at}).scalars())
        queues: list[str] = []
        for digest in keys:
            queues += connection.execute(self.statements.promote, {"digest": digest, "now": at}).scalars()
        return queues

    def release_uniques(
        self, connection: Connection, jobs: Iterable[payload.JobDict | None], *, at_start: bool
    ) -> None:
        """Release the unique keys held by these jobs (those held until start, or until done),
        where the job is still the holder."""
        releases = set()
        for job in jobs:
            if job is None or type(job.get("jid")) is not str:
                continue
            unique = unique_of(job)
            if unique is not None and unique.until_start == at_start:
                releases.add((unique.digest, str(job["jid"])[:64]))
        for digest, jid in sorted(releases):
            connection.execute(self.statements.release_unique, {"digest": digest, "jid": jid})

    # Claims.

    def after_claim(self, connection: Connection, me: str, claimed: Sequence[Claimed]) -> set[int]:
        """Check the rate limits of the claimed jobs that have one, in claim order, and
        release the unique keys held until start of those that start; return the ids of the
        jobs postponed (back in the schedule, unclaimed)."""
        rated = [(row_id, rate) for row_id, job in claimed if (rate := rate_of(job)) is not None]
        postponed: set[int] = set()
        if rated:
            next_at: dict[str, float] = {}
            for rate in sorted({rate.digest: rate for _, rate in rated}.values(), key=lambda r: r.digest):
                params = {"digest": rate.digest, "key": storable(rate.key)}
                next_at[rate.digest] = float(
                    connection.execute(self.statements.lock_rate, params).scalar_one()
                )
            # Read once the keys are locked: a time read before a wait on another process's
            # lock would log these starts earlier than they happen, and a window counted
            # from the log would then let more than the limit start in a second.
            now = payload.now()
            for row_id, rate in rated:
                due = self._rate_check(connection, rate, now, next_at)
                if due is not None:
                    connection.execute(self.statements.postpone, {"id": row_id, "at": due, "me": me})
                    postponed.add(row_id)
        starting = [job for row_id, job in claimed if row_id not in postponed]
        self.release_uniques(connection, starting, at_start=True)
        return postponed

    def _rate_check(
        self, connection: Connection, rate: RateOf, now: float, next_at: dict[str, float]
    ) -> float | None:
        """Record a start of the rate key, or return when the job is due again: when the
        window allows one more start, and a spacing (window / count) after the key's last
        postponed job, so that a backlog is spread out instead of stampeding."""
        digest, count, window = rate.digest, rate.count, rate.window
        cutoff = now - window
        params = {"digest": digest, "cutoff": cutoff}
        connection.execute(self.statements.prune_rate, params)
        started, oldest = connection.execute(self.statements.rate_window, params).one()
        if int(started) < count:
            connection.execute(self.statements.rate_start, {"digest": digest, "now": now})
            return None
        due = max(float(oldest) + window, next_at[digest] + window / count)
        next_at[digest] = due
        connection.execute(self.statements.rate_next, {"digest": digest, "at": due})
        return due

    # The safety sweep.

    def expire(self, connection: Connection, now: float) -> None:
        """Drop expired unique holds and rate log entries older than any window."""
        connection.execute(self.statements.expire_uniques, {"now": now})
        connection.execute(self.statements.expire_rates, {"cutoff": now - LONGEST_WINDOW})

    def unstall(self, tx: Tx, now: float) -> int:
        """Promote from every key whose line waits while it has free slots (a holder deleted
        by hand, or any path that missed a promotion); return how many jobs were promoted."""
        connection = tx.connection
        stalled = sorted(str(d) for d in connection.execute(self.statements.stalled_lanes).scalars())
        if not stalled:
            return 0
        self.lock_lanes(connection, stalled)
        promoted = self.promote(connection, stalled, now)
        tx.announce(promoted)
        return len(promoted)

    def forget_idle(self, connection: Connection, limit: int) -> int:
        """Delete up to ``limit`` keys with no job waiting or holding a slot; return how many."""
        idle = [str(d) for d in connection.execute(self.statements.idle_lanes, {"limit": limit}).scalars()]
        if not idle:
            return 0
        return int(connection.execute(self.statements.drop_lanes, {"digests": self._digests(idle)}).rowcount)


#: A claimed job that carries a rate limit or a unique key: its row id and decoded payload.
Claimed = tuple[int, payload.JobDict]


def flow_claimed(rows: Iterable[tuple[int, bytes]]) -> list[Claimed]:
    """The claimed jobs the claim must check further: those with a rate limit, or a unique
    key held until start."""
    found = []
    for row_id, raw in rows:
        job = decoded(raw, RATE_MARK, UNTIL_MARK)
        if job is None:
            continue
        unique = unique_of(job)
        if rate_of(job) is not None or (unique is not None and unique.until_start):
            found.append((row_id, job))
    return found
