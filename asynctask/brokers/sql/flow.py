"""Flow control in the SQL broker's transactions: concurrency keys' lines and slots, unique
keys, rate limits (docs/internals/flow-control-sql.md).

Every function runs inside the caller's write transaction, next to the job change it goes
with, so that a slot, a unique hold or a rate log entry changes exactly when the job does.
Lock order (PostgreSQL), the same everywhere so that no two transactions wait on each other
in a cycle: rate keys, unique keys, then concurrency keys, each kind by digest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection

from asynctask import payload
from asynctask.brokers.sql.flow_fields import (
    LANE_MARK,
    RATE_MARK,
    UNIQUE_MARK,
    UNTIL_MARK,
    LaneOf,
    RateOf,
    decoded,
    lane_of,
    rate_of,
    storable,
    unique_of,
)
from asynctask.brokers.sql.models import LANE, QUEUED
from asynctask.brokers.sql.statements import Statements
from asynctask.brokers.sql.transactions import JobRow, Tx

#: Starts older than this are dropped from every rate log by the sweep (the longest window).
LONGEST_WINDOW = 3600.0


def is_flow(raw: bytes | str) -> bool:
    """Whether ending this job may free a slot or a unique key (a substring test only)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    return LANE_MARK in data or UNIQUE_MARK in data


class Flow:
    def __init__(self, sql: Statements) -> None:
        self._sql = sql
        self._flow = sql.flow

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
                self._flow.take_unique,
                {
                    "digest": key_digest,
                    "key": storable(unique.key),
                    "jid": row[0],
                    "expires_at": expires_at,
                    "now": now,
                },
            ).scalar()
            if taken is None:
                holder = connection.execute(self._flow.unique_holder, {"digest": key_digest}).scalar_one()
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
                self._flow.free_slots, {"digests": self._digests(list(keyed))}
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
        if self._sql.postgres:
            params = {
                "digests": [lane.digest for lane in ordered],
                "keys": [storable(lane.key) for lane in ordered],
                "lims": [lane.limit for lane in ordered],
            }
            connection.execute(self._flow.lock_lane, params)
            return
        connection.execute(
            self._flow.lock_lane,
            [{"digest": lane.digest, "key": storable(lane.key), "lim": lane.limit} for lane in ordered],
        )

    def _digests(self, digests: list[str]) -> Any:
        """A ``:digests`` parameter: an array on PostgreSQL, JSON text for SQLite's json_each."""
        return digests if self._sql.postgres else json.dumps(digests)

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
        found = connection.execute(self._flow.lanes_of, {"ids": self._sql.ids(ids)}).scalars()
        return sorted(str(digest) for digest in found)

    def lock_lanes(self, connection: Connection, digests: Sequence[str]) -> None:
        """Lock existing keys' rows, in digest order (PostgreSQL; SQLite's writers are serial)."""
        if digests and self._flow.lock_lanes is not None:
            connection.execute(self._flow.lock_lanes, {"digests": sorted(digests)})

    def promote(self, connection: Connection, digests: Iterable[str], now: float | None = None) -> list[str]:
        """Move the next waiting jobs of each key into their queues, as many as it has free
        slots (hold the keys' locks); return their queues."""
        at = payload.now() if now is None else now
        keys = sorted(set(digests))
        if not keys:
            return []
        if self._sql.postgres:
            return list(connection.execute(self._flow.promote, {"digests": keys, "now": at}).scalars())
        queues: list[str] = []
        for digest in keys:
            queues += connection.execute(self._flow.promote, {"digest": digest, "now": at}).scalars()
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
            connection.execute(self._flow.release_unique, {"digest": digest, "jid": jid})

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
                next_at[rate.digest] = float(connection.execute(self._flow.lock_rate, params).scalar_one())
            # Read once the keys are locked: a time read before a wait on another process's
            # lock would log these starts earlier than they happen, and a window counted
            # from the log would then let more than the limit start in a second.
            now = payload.now()
            for row_id, rate in rated:
                due = self._rate_check(connection, rate, now, next_at)
                if due is not None:
                    connection.execute(self._flow.postpone, {"id": row_id, "at": due, "me": me})
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
        connection.execute(self._flow.prune_rate, params)
        started, oldest = connection.execute(self._flow.rate_window, params).one()
        if int(started) < count:
            connection.execute(self._flow.rate_start, {"digest": digest, "now": now})
            return None
        due = max(float(oldest) + window, next_at[digest] + window / count)
        next_at[digest] = due
        connection.execute(self._flow.rate_next, {"digest": digest, "at": due})
        return due

    # The safety sweep.

    def expire(self, connection: Connection, now: float) -> None:
        """Drop expired unique holds and rate log entries older than any window."""
        connection.execute(self._flow.expire_uniques, {"now": now})
        connection.execute(self._flow.expire_rates, {"cutoff": now - LONGEST_WINDOW})

    def unstall(self, tx: Tx, now: float) -> int:
        """Promote from every key whose line waits while it has free slots (a holder deleted
        by hand, or any path that missed a promotion); return how many jobs were promoted."""
        connection = tx.connection
        stalled = sorted(str(d) for d in connection.execute(self._flow.stalled_lanes).scalars())
        if not stalled:
            return 0
        self.lock_lanes(connection, stalled)
        promoted = self.promote(connection, stalled, now)
        tx.announce(promoted)
        return len(promoted)

    def forget_idle(self, connection: Connection, limit: int) -> int:
        """Delete up to ``limit`` keys with no job waiting or holding a slot; return how many."""
        idle = [str(d) for d in connection.execute(self._flow.idle_lanes, {"limit": limit}).scalars()]
        if not idle:
            return 0
        return int(connection.execute(self._flow.drop_lanes, {"digests": self._digests(idle)}).rowcount)


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
