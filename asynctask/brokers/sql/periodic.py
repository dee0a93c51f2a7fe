"""Periodic schedules in the SQL broker (see ``brokers.periodic``): ``asynctask_periodic`` and
``asynctask_periodic_scheduler`` (Alembic revision 0009).

A tick is taken by an ``UPDATE ... SET last = tick WHERE last < tick``, in the transaction
that inserts its job: of two workers racing for it, the second waits on the first's row lock
(PostgreSQL) or write lock (SQLite), then finds ``last`` already moved and takes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from itertools import groupby

from sqlalchemy import bindparam, delete, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from asynctask import payload
from asynctask.brokers.periodic import (
    FORGET_AFTER,
    SCHEDULER_STALE,
    Declaration,
    Hold,
    ScheduleRecord,
    ScheduleState,
    Tick,
    ready,
)
from asynctask.brokers.sql.models import QUEUED, PeriodicSchedule, PeriodicScheduler
from asynctask.brokers.sql.push import row
from asynctask.brokers.sql.transactions import JobRow, Store, Tx

#: Schedules per statement of a declaration or a take.
CHUNK = 500

# A take's ticks come as one JSON array of {name, at, jid}: one statement text whatever their
# number (a VALUES list of bound parameters would be parsed anew for each size). A schedule
# moves only forward; a paused one keeps its last job.
_TAKE = """
UPDATE asynctask_periodic SET last = v.at,
    last_jid = CASE WHEN asynctask_periodic.paused OR v.jid IS NULL
        THEN asynctask_periodic.last_jid ELSE v.jid END,
    last_enqueued_at = CASE WHEN asynctask_periodic.paused OR v.jid IS NULL
        THEN asynctask_periodic.last_enqueued_at ELSE :now END
FROM {ticks}
WHERE asynctask_periodic.name = v.name
  AND (asynctask_periodic.last IS NULL OR asynctask_periodic.last < v.at)
RETURNING asynctask_periodic.name, asynctask_periodic.paused
"""
TAKE_POSTGRES = _TAKE.format(
    ticks="json_to_recordset(CAST(:ticks AS JSON)) AS v(name TEXT, at BIGINT, jid TEXT)"
)
TAKE_SQLITE = _TAKE.format(
    ticks="(SELECT json_extract(value, '$.name') AS name, json_extract(value, '$.at') AS at, "
    "json_extract(value, '$.jid') AS jid FROM json_each(:ticks)) AS v"
)

# A declaration's schedules come as one JSON array of ``Declaration`` fields, for the same reason.
# A schedule the table holds keeps its last tick, last job and pause.
_DECLARE = """
INSERT INTO asynctask_periodic (name, job, cron, tz, queue, catch_up, declared_at, last, paused)
SELECT d.name, d.job, d.cron, d.tz, d.queue, d.catch_up, :now, d.first_last, false FROM {rows} WHERE true
ON CONFLICT (name) DO UPDATE SET job = excluded.job, cron = excluded.cron, tz = excluded.tz,
    queue = excluded.queue, catch_up = excluded.catch_up, declared_at = excluded.declared_at
"""
DECLARE_POSTGRES = _DECLARE.format(
    rows="json_to_recordset(CAST(:rows AS JSON)) AS d(name TEXT, job TEXT, cron TEXT, tz TEXT, queue TEXT, "
    "catch_up TEXT, first_last BIGINT)"
)
DECLARE_SQLITE = _DECLARE.format(
    rows="(SELECT "
    + ", ".join(
        f"json_extract(value, '$.{field}') AS {field}"
        for field in ("name", "job", "cron", "tz", "queue", "catch_up", "first_last")
    )
    + " FROM json_each(:rows)) AS d"
)

# The names come as one JSON array: one statement text whatever their number.
_STATES = "SELECT name, last, paused FROM asynctask_periodic WHERE name IN (SELECT value FROM {names})"
STATES_POSTGRES = _STATES.format(names="json_array_elements_text(CAST(:names AS JSON)) AS value")
STATES_SQLITE = _STATES.format(names="json_each(:names)")

#: The scheduler row whose beat is the last second a pass was leased for.
PASS_ROW = ""
# Inserted, or moved forward: a row comes back only to the first scheduler asking for the second.
LEASE = f"""
INSERT INTO asynctask_periodic_scheduler (identity, beat) VALUES ('{PASS_ROW}', :second)
ON CONFLICT (identity) DO UPDATE SET beat = excluded.beat
WHERE asynctask_periodic_scheduler.beat < excluded.beat
RETURNING identity
"""

#: Pushes jobs, given their rows, inside a write transaction (``SqlBroker.push_rows_in``); returns
#: the stored jids.
PushIn = Callable[[Tx, payload.PushEntries, list[JobRow], Sequence[str]], list[str]]


class _Abandoned(Exception):
    """The take's hold said no: its transaction rolls back."""


class SqlPeriodic:
    def __init__(self, store: Store, push_in: PushIn) -> None:
        self.store = store
        self.push_in = push_in
        self.errors = store.errors
        self._insert = pg_insert if store.postgres else sqlite_insert
        self._take_statement = text(TAKE_POSTGRES if store.postgres else TAKE_SQLITE)
        self._declare_statement = text(DECLARE_POSTGRES if store.postgres else DECLARE_SQLITE)
        self._states_statement = text(STATES_POSTGRES if store.postgres else STATES_SQLITE)
        self._lease_statement = text(LEASE)

    def declare(self, declarations: Sequence[Declaration], identity: str, now: float) -> None:
        ordered = sorted(declarations, key=lambda d: d.name)
        with self.store.write() as tx:
            self._beat(tx, identity, now)
            for start in range(0, len(ordered), CHUNK):
                rows = [asdict(d) for d in ordered[start : start + CHUNK]]
                tx.connection.execute(self._declare_statement, {"rows": json.dumps(rows), "now": now})
            tx.connection.execute(
                delete(PeriodicSchedule).where(PeriodicSchedule.declared_at < now - FORGET_AFTER)
            )
            tx.connection.execute(
                delete(PeriodicScheduler).where(PeriodicScheduler.beat < now - FORGET_AFTER)
            )

    def _beat(self, tx: Tx, identity: str, now: float) -> None:
        statement = self._insert(PeriodicScheduler).values(identity=identity, beat=now)
        tx.connection.execute(
            statement.on_conflict_do_update(index_elements=["identity"], set_={"beat": now})
        )

    def states(self, names: Sequence[str]) -> dict[str, ScheduleState]:
        with self.store.read() as connection:
            rows = connection.execute(self._states_statement, {"names": json.dumps(list(names))})
            return {name: ScheduleState(last, bool(paused)) for name, last, paused in rows}

    def lease(self, identity: str, second: int) -> bool:
        with self.store.write() as tx:
            self._beat(tx, identity, second)
            return tx.connection.execute(self._lease_statement, {"second": second}).first() is not None

    def others_alive(self, identity: str, now: float) -> bool:
        with self.store.read() as connection:
            row = connection.execute(
                select(PeriodicScheduler.identity)
                .where(
                    PeriodicScheduler.beat >= now - SCHEDULER_STALE,
                    PeriodicScheduler.identity.not_in((identity, PASS_ROW)),
                )
                .limit(1)
            ).first()
        return row is not None

    def take(self, ticks: Sequence[Tick], identity: str, now: float, hold: Hold = ready) -> list[str]:
        """PostgreSQL runs the whole take ahead and holds only its commit: the jobs become
        visible together at the tick, a commit after it rather than a take's transaction (about
        100 ms for 1,000 schedules). The schedules' rows stay locked meanwhile, which delays
        only another take or declaration. SQLite holds before it begins: its one writer would
        stop every worker's claims while the transaction waits."""
        if not self.store.postgres and not hold():
            return []
        try:
            return self._take_all(ticks, identity, now, hold if self.store.postgres else ready)
        except _Abandoned:
            return []

    def _take_all(self, ticks: Sequence[Tick], identity: str, now: float, hold: Hold) -> list[str]:
        # Round k holds the k-th tick of each schedule: one statement moves each schedule once.
        rounds: list[list[Tick]] = []
        for _, same in groupby(sorted(ticks, key=lambda t: (t.name, t.at)), key=lambda t: t.name):
            for k, tick in enumerate(same):
                if k == len(rounds):
                    rounds.append([])
                rounds[k].append(tick)
        with self.store.write() as tx:
            self._beat(tx, identity, now)
            taken: list[Tick] = []
            for round_ in rounds:
                for start in range(0, len(round_), CHUNK):
                    taken += self._take(tx, round_[start : start + CHUNK], now)
            entries: list[tuple[payload.JobDict, float | None]] = []
            rows: list[JobRow] = []
            transitions: list[str] = []
            for tick in taken:
                assert tick.job is not None
                entries.append((tick.job, None))
                rows.append(row(tick.job, QUEUED, now, tick.encoded))
                transitions += tick.transitions
            stored = self.push_in(tx, entries, rows, transitions) if entries else []
            # The take wrote each job's own jid; a unique job whose key was held was not
            # stored, and its schedule's last job is the holder.
            held = [
                {"b_name": t.name, "b_jid": jid}
                for t, (job, _), jid in zip(taken, entries, stored, strict=True)
                if jid != job["jid"]
            ]
            if held:
                tx.connection.execute(
                    update(PeriodicSchedule)
                    .where(PeriodicSchedule.name == bindparam("b_name"))
                    .values(last_jid=bindparam("b_jid")),
                    held,
                )
            if not hold():
                raise _Abandoned
        return [jid for (job, _), jid in zip(entries, stored, strict=True) if jid == job["jid"]]

    def _take(self, tx: Tx, ticks: Sequence[Tick], now: float) -> list[Tick]:
        """Move each tick's schedule to it if it is later (with the tick's jid as its last job);
        the ticks to push (not skipped, not paused)."""
        values = [{"name": t.name, "at": t.at, "jid": None if t.job is None else t.job["jid"]} for t in ticks]
        rows = tx.connection.execute(self._take_statement, {"ticks": json.dumps(values), "now": now})
        moved = {name: bool(paused) for name, paused in rows}
        return [t for t in ticks if t.name in moved and not moved[t.name] and t.job is not None]

    def leave(self, identity: str) -> None:
        with self.store.write() as tx:
            tx.connection.execute(delete(PeriodicScheduler).where(PeriodicScheduler.identity == identity))

    def records(self) -> list[ScheduleRecord]:
        with self.store.read() as connection:
            rows = connection.execute(select(PeriodicSchedule).order_by(PeriodicSchedule.name)).all()
        return [
            ScheduleRecord(
                name=r.name,
                job=r.job,
                cron=r.cron,
                tz=r.tz,
                queue=r.queue,
                catch_up=r.catch_up,
                declared_at=r.declared_at,
                last=r.last,
                last_jid=r.last_jid,
                last_enqueued_at=r.last_enqueued_at,
                paused=bool(r.paused),
            )
            for r in rows
        ]

    def set_paused(self, name: str, paused: bool) -> bool:
        with self.store.write() as tx:
            result = tx.connection.execute(
                update(PeriodicSchedule).where(PeriodicSchedule.name == name).values(paused=paused)
            )
        return bool(result.rowcount)
