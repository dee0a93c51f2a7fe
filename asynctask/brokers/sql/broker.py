"""SqlBroker: the broker interface on one jobs table, in SQLite or PostgreSQL.

The database is the tracking database too, so a job's tracking transitions are applied in
the same transaction as its state change: a finished job's ack and
its ``finish``, a failed job's move to the retry set and its ``error``, a push and its
``enqueue`` commit together or not at all. No flusher runs beside a worker.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from asynctask import fairness, payload
from asynctask.brokers.base import Beat, BeatReply, Broker, DueSet
from asynctask.brokers.fetcher import UnitOfWork
from asynctask.brokers.sql import processes
from asynctask.brokers.sql.callbacks import SqlCallbackPusher
from asynctask.brokers.sql.checkpoints import SqlCheckpoints
from asynctask.brokers.sql.feeds import SqlFeeds, feed_of, is_fed
from asynctask.brokers.sql.fetch import SqlFetcher
from asynctask.brokers.sql.flow import Flow, LaneOf, is_flow, lane_of
from asynctask.brokers.sql.holds import SqlHolds
from asynctask.brokers.sql.models import DEAD, HELD, QUEUED, RETRY, SCHEDULED, STOPPED
from asynctask.brokers.sql.periodic import SqlPeriodic
from asynctask.brokers.sql.predicates import JOB_COLUMNS
from asynctask.brokers.sql.push import SqlStaging, is_keyed, jid, priority, push_rows, row
from asynctask.brokers.sql.tracking import SqlTrackingStore
from asynctask.brokers.sql.transactions import JobRow, Store, Tx
from asynctask.brokers.sql.wake import PgListener, SqlitePoll, Wake
from asynctask.db.engine import create_database_engine
from asynctask.feeds import FEED_FIELD, Feed
from asynctask.settings import Settings
from asynctask.tracking.outbox import Outbox, draining
from asynctask.tracking.transitions import split_by_job

logger = logging.getLogger("asynctask.broker")

#: Due jobs moved per transaction by the scheduled/retry poller.
DUE_BATCH = 100
#: Connections beyond the processor threads: heartbeat, poller, recovery, a client push, and
#: the burial a poller's rewrite may do while its batch's transaction is open.
SPARE_CONNECTIONS = 5
#: Seconds between two flow-control sweeps of one process (they follow orphan recovery).
SWEEP_INTERVAL = 30.0
#: Idle concurrency keys forgotten per sweep at most (one short transaction).
IDLE_KEYS_PER_SWEEP = 1000
#: Jobs a FIFO queue's place counts at most: a poll of a task's place must not read a
#: queue of millions of jobs.
AHEAD_BOUND = 100_000


class SqlBroker(Broker):
    errors = (SQLAlchemyError, OSError)
    backend = "sql"
    feeds: SqlFeeds

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        self._owns_engine = engine is None
        self.engine = (
            engine
            if engine is not None
            else create_database_engine(
                settings.broker,
                pool_size=settings.concurrency + SPARE_CONNECTIONS,
                max_overflow=SPARE_CONNECTIONS,
                # A ping per checkout would double a claim's round trips; a connection the
                # server dropped fails one statement instead, which workers retry.
                pool_pre_ping=False,
            )
        )
        self.store = Store(self.engine)
        self.callback_pusher = SqlCallbackPusher(self.store)
        self.store.callbacks = self.callback_pusher
        self.flow = Flow(self.store.sql.postgres)
        self.feeds = SqlFeeds(self.store, self.flow)
        self.holds = SqlHolds(self.feeds, self.store)
        self.store.holds = self.holds
        self._next_sweep = 0.0
        self.tracking = SqlTrackingStore(self.store)
        self.periodic = SqlPeriodic(self.store, self.push_rows_in)
        self._checkpoints = SqlCheckpoints(self.store)
        self.checkpoints = self._checkpoints
        self._fetchers: list[SqlFetcher] = []

    def close(self) -> None:
        for fetcher in self._fetchers:
            fetcher.close()
        if self._owns_engine:
            self.engine.dispose()

    def ping(self) -> None:
        with self.store.read() as connection:
            connection.execute(self.store.sql.ping)

    def server_time(self) -> float:
        if not self.store.postgres:
            # SQLite's database is a file of this machine: its clock is this machine's.
            return time.time()
        with self.store.read() as connection:
            return float(
                connection.exec_driver_sql("SELECT extract(epoch FROM clock_timestamp())").scalar_one()
            )

    def push(
        self,
        entries: payload.PushEntries,
        *,
        transitions: Sequence[str] = (),
        atomic: bool = False,
    ) -> list[str]:
        """Insert the jobs (and apply their tracking ``transitions``) in one transaction,
        so ``atomic`` holds whatever it says. A job whose unique key is held is not stored:
        its holder's jid is returned in its place. A job of a fed task whose feed exists (a
        task's retry) joins the front of its feed's held jobs, and the feed releases."""
        rows = push_rows(entries, self.settings.max_payload_bytes)
        with self.store.write() as tx:
            return self.push_rows_in(tx, entries, rows, transitions)

    def push_rows_in(
        self,
        tx: Tx,
        entries: payload.PushEntries,
        rows: list[JobRow],
        transitions: Sequence[str],
    ) -> list[str]:
        """``push`` of the jobs' ``rows`` (built by the caller) inside the caller's transaction
        ``tx``: a periodic tick's, or an asyncio client's."""
        fed = {
            i: feed
            for i, (job, _) in enumerate(entries)
            if FEED_FIELD in job and rows[i][2] == QUEUED and (feed := feed_of(job)) is not None
        }
        if fed:
            return self._push_fed(tx, entries, rows, transitions, fed)
        return self._push(tx, entries, rows, transitions)

    def _push(
        self,
        tx: Tx,
        entries: payload.PushEntries,
        rows: list[JobRow],
        transitions: Sequence[str],
    ) -> list[str]:
        pairs = [(job, r) for (job, _), r in zip(entries, rows, strict=True)]
        if not any(is_keyed(job, r) for job, r in pairs):
            self.store.record(tx.connection, transitions)
            self.store.insert_jobs(tx.connection, rows)
            tx.announce(r[1] for r in rows if r[2] == QUEUED)
            return [str(job["jid"]) for job, _ in entries]
        now = payload.now()
        stored, kept, lanes = self.flow.admit(tx.connection, pairs, now)
        # A duplicate's transitions are left out: its "enqueue" would wait for a job that
        # never runs. The rest are applied before the jobs become claimable, as always.
        skipped = {
            str(job["jid"]) for (job, _), jid in zip(entries, stored, strict=True) if jid != job["jid"]
        }
        self.store.record(tx.connection, split_by_job(transitions, skipped)[0])
        self.store.insert_jobs(tx.connection, kept)
        tx.announce(r[1] for r in kept if r[2] == QUEUED)
        tx.announce(self.flow.promote(tx.connection, lanes, now))
        return stored

    def _push_fed(
        self,
        tx: Tx,
        entries: payload.PushEntries,
        rows: list[JobRow],
        transitions: Sequence[str],
        fed: dict[int, str],
    ) -> list[str]:
        """``_push`` where the jobs ``fed`` (by position) name a feed: those whose feed exists
        are held at its front (``run_at`` 0 comes before every staged row; their unique keys
        are not taken, as a task's chunk jobs carry none), the others are pushed as usual."""
        connection = tx.connection
        # The fed jobs' transitions first, then the feeds, then unique and concurrency keys:
        # the order of every path. (A job held at its feed's front takes no unique key, so it
        # is never left out as a duplicate; the others' transitions go with ``_push``.)
        others, named = split_by_job(transitions, {str(entries[i][0]["jid"]) for i in fed})
        self.store.record(connection, [entry for entries_of in named.values() for entry in entries_of])
        live = {str(found.task_id) for found in self.feeds.lock(connection, fed.values())}
        fronts: dict[str, list[JobRow]] = {}
        for i, feed in fed.items():
            if feed in live:
                fronts.setdefault(feed, []).append((*rows[i][:2], HELD, rows[i][3], 0.0, *rows[i][5:]))
        rest = [i for i in range(len(entries)) if fed.get(i) not in live]
        stored = [str(job["jid"]) for job, _ in entries]
        pushed = self._push(tx, [entries[i] for i in rest], [rows[i] for i in rest], others)
        for i, jid_ in zip(rest, pushed, strict=True):
            stored[i] = jid_
        for feed, held in fronts.items():
            self.store.insert_jobs(connection, held, feed=feed)
            self.feeds.add_held(connection, feed, len(held))
        keyed = any(rows[i][7] is not None for i in rest)
        self.feeds.release(tx, self.feeds.lock(connection, fronts), payload.now(), lanes_held=keyed)
        return stored

    def staging(self, task_id: str, feed: Feed | None = None, share: str | None = None) -> SqlStaging:
        fed = None if feed is None else (self.feeds, task_id, feed)
        return SqlStaging(self.store, self.flow, self.settings.max_payload_bytes, fed, share)

    def fetcher(self, identity: str, outbox: Outbox | None = None) -> SqlFetcher:
        queues = list(dict.fromkeys(q.name for q in self.settings.queues))
        store = self.store
        wake: Wake
        if store.bell is None:
            wake = PgListener(self.engine, queues)
        else:
            wake = SqlitePoll(store.bell, store.read, store.sql.has_work(len(queues)), queues)
        fetcher = SqlFetcher(self.store, self.flow, self.feeds, identity, self.settings, wake, outbox)
        self._fetchers.append(fetcher)
        return fetcher

    def jobs_ahead(self, queue: str, share: str, waiting: int, earlier: int) -> int | None:
        sql = self.store.sql
        with self.store.read() as connection:
            if not self.settings.is_fair(queue):
                bounds = {"queue": queue, "bound": AHEAD_BOUND}
                queued = connection.execute(sql.push.ahead_in_order, bounds).scalar_one()
                return max(0, int(queued) - waiting) if queued else None
            head, width, plain = connection.execute(sql.push.ahead_in_turns, {"queue": queue}).one()
        if head is None:
            return None
        shares = int(width) + (1 if plain else 0)
        # Where the share stands in the round is not kept: taken as the worst, last.
        return fairness.jobs_ahead(earlier=earlier, shares=shares, before_in_round=shares - 1)

    def retry_at(
        self, unit: UnitOfWork, job: payload.JobDict, at: float, outbox: Outbox | None = None
    ) -> None:
        """Move the claimed row to the retry set, with the outbox's transitions (the job's
        ``error`` and "waiting for retry"), so they are stored before anyone can retry it.

        A keyed job keeps its slot (its key's later jobs wait for it), unless it frees it on
        failure: then the next job of its key is promoted. Its unique key stays held. A fed
        job frees its feed's slot: the feed releases."""
        encoded = payload.dumps_storable(job)
        lane = lane_of(job) if "concurrency_key" in job else None
        hold = lane is not None and not lane.free_on_failure
        with draining(outbox) as transitions, self.store.write() as tx:
            self.store.record(tx.connection, transitions)
            # After the tracking rows, before the keys: the order of every path.
            feeds = self.feeds.lock_of_rows(tx.connection, [int(unit.ref)]) if is_fed(encoded) else []
            moved = row(job, RETRY, at, encoded, holds=hold)
            if lane is None or hold:
                self._to_set(tx, unit, moved)
            else:
                with self.flow.ending(tx, [int(unit.ref)], release_unique=False):
                    self._to_set(tx, unit, moved)
            if feeds:
                self.feeds.release(tx, feeds, payload.now(), lanes_held=lane is not None)

    def kill(self, unit: UnitOfWork | None, encoded: str) -> None:
        """Move a job to the dead set (trimmed by age and count, as Sidekiq does)."""
        now = payload.now()
        s = self.settings
        with self.store.write() as tx:
            self._end_in_set(tx, unit, encoded, DEAD, now)
            tx.connection.execute(self.store.sql.sets.trim_dead_by_age, {"cutoff": now - s.dead_timeout})
            tx.connection.execute(self.store.sql.sets.trim_dead_by_count, {"keep": s.dead_max_jobs})

    def park(self, unit: UnitOfWork, encoded: str, outbox: Outbox | None = None) -> None:
        """Move the claimed row to the stopped set (never trimmed), with the outbox's
        transitions, so they are stored before anyone can resume the job. It ends as a dead
        job ends (``_end_in_set``)."""
        with draining(outbox) as transitions, self.store.write() as tx:
            self.store.record(tx.connection, transitions)
            # After the tracking rows, before the keys: the order of every path.
            self._end_in_set(tx, unit, encoded, STOPPED, payload.now())

    def _end_in_set(self, tx: Tx, unit: UnitOfWork | None, encoded: str, state: str, now: float) -> None:
        """In ``tx``, move the job (the claimed row of ``unit``, or a new row if there is no
        unit) to the set ``state`` as ``encoded``, scored ``now``, and end it: its slot goes to
        its key's next job, a unique key it holds until done is released, a fed job's feed
        releases."""
        job = _job_fields(encoded)
        if unit is not None:
            job.setdefault("queue", unit.queue)
        ends = [int(unit.ref)] if unit is not None and is_flow(encoded) else []
        fed = unit is not None and is_fed(encoded)
        feeds = self.feeds.lock_of_rows(tx.connection, [int(unit.ref)]) if unit is not None and fed else []
        with self.flow.ending(tx, ends, [encoded] if ends else []):
            self._to_set(tx, unit, row(job, state, now, encoded))
        if feeds:
            self.feeds.release(tx, feeds, now, lanes_held=bool(ends))

    def release(self, unit: UnitOfWork) -> None:
        """Delete the claimed row; a keyed job's slot goes to its key's next job, a unique
        key it holds until done is released, a fed job's feed releases."""
        flow, fed = is_flow(unit.payload), is_fed(unit.payload)
        if not (flow or fed):
            with self.store.write(single_statement=True) as tx:
                tx.connection.execute(self.store.sql.release, {"id": unit.ref})
            return
        ends = [int(unit.ref)] if flow else []
        with self.store.write() as tx:
            feeds = self.feeds.lock_of_rows(tx.connection, [int(unit.ref)]) if fed else []
            with self.flow.ending(tx, ends, [unit.payload] if flow else []):
                tx.connection.execute(self.store.sql.release, {"id": unit.ref})
            if feeds:
                self.feeds.release(tx, feeds, payload.now(), lanes_held=flow)

    def enqueue_due(self, due_set: DueSet, rewrite: Callable[[bytes], payload.JobDict | None]) -> int:
        """Move every due job of the set to its queue, ``DUE_BATCH`` per transaction."""
        state = RETRY if due_set == "retry" else SCHEDULED
        total = 0
        while True:
            now = self.clock.now()
            params = {"state": state, "now": now, "limit": DUE_BATCH}
            if self.store.postgres:
                # The batch stays locked (SKIP LOCKED by other pollers) while it is rewritten.
                with self.store.write() as tx:
                    due = tx.connection.execute(self.store.sql.sets.due, params).all()
                    total += self._apply_due(tx, self._rewritten(due, rewrite, now), state, now)
            else:
                # Read first: the rewrite may bury a job, a write of its own.
                with self.store.read() as connection:
                    due = connection.execute(self.store.sql.sets.due, params).all()
                changes = self._rewritten(due, rewrite, now)
                with self.store.write() as tx:
                    total += self._apply_due(tx, changes, state, now)
            if len(due) < DUE_BATCH:
                return total

    def recover_orphans(self, identity: str) -> int:
        """Take back the claims of dead processes; every ``SWEEP_INTERVAL``, also run the
        flow-control sweep (``Flow.sweep``)."""
        recovered = processes.recover_orphans(self.store)
        if time.monotonic() >= self._next_sweep:
            self.sweep()
            self._next_sweep = time.monotonic() + SWEEP_INTERVAL
        return recovered

    def sweep(self) -> int:
        """Forget expired unique holds and old rate log entries, promote from lines whose key
        has free slots, forget idle keys and old checkpoints, push task callbacks left due and
        release or drop the held jobs of tasks a process left due; return how many jobs were
        promoted. One transaction per kind of lock, so none waits for another in a cycle."""
        now = payload.now()
        self.callback_pusher.push_due(self.engine)
        self.holds.release_due(self.engine)
        with self.store.write() as tx:
            self.flow.expire(tx.connection, now)
        with self.store.write() as tx:
            promoted = self.flow.unstall(tx, now)
        with self.store.write() as tx:
            self.flow.forget_idle(tx.connection, IDLE_KEYS_PER_SWEEP)
        self._checkpoints.expire(now)
        if promoted:
            logger.warning("the flow-control sweep promoted %d job(s) from lines with free slots", promoted)
        return promoted

    def requeue_process(self, identity: str) -> int:
        return processes.requeue_process(self.store, identity)

    def process_count(self) -> int:
        return processes.count(self.store)

    def beat(self, beat: Beat) -> BeatReply:
        return processes.write_beat(self.store, beat, self.settings.process_ttl)

    def clear_process(self, identity: str, processed: int, failed: int) -> None:
        processes.clear(self.store, identity, processed, failed)

    def _to_set(self, tx: Tx, unit: UnitOfWork | None, moved: JobRow) -> None:
        """The claimed row of ``unit`` becomes ``moved``; a new row if there is no unit, or if
        the row is gone (this process was presumed dead, and another took the job back and
        finished it): Redis would add the job to the set all the same."""
        if unit is not None:
            values = dict(zip(JOB_COLUMNS, moved, strict=True))
            if tx.connection.execute(self.store.sql.sets.to_set, {**values, "id": unit.ref}).rowcount:
                return
            logger.warning(
                "job %s was gone from its queue (taken back from this process after its heartbeat "
                "expired); it is added to the %s set anyway",
                moved[0],
                moved[2],
            )
        # A new row holds no slot: the slot it had went with the row taken back (when due, a
        # keyed job goes through its key's line).
        self.store.insert_jobs(tx.connection, [(*moved[:8], False)])

    def _rewritten(
        self, due: Sequence[Any], rewrite: Callable[[bytes], payload.JobDict | None], now: float
    ) -> list[Rewritten]:
        """Each due row's job as rewritten and encoded (``due_payload``), or None to drop it."""
        changes: list[Rewritten] = []
        for row_id, old, lane, holds, feed in due:
            member = old if isinstance(old, bytes) else old.encode()
            job = rewrite(member)
            encoded = None if job is None else self.due_payload(member, job, now)
            rewritten = None if job is None or encoded is None else (job, encoded)
            changes.append((row_id, old, rewritten, lane is not None and not holds, feed))
        return changes

    def _apply_due(self, tx: Tx, changes: Sequence[Rewritten], state: str, now: float) -> int:
        """Queue each rewritten job (dropping those refused or buried) if its row still holds
        what was read; return how many were queued. A keyed job that holds no slot enters its
        key's line instead (``move_due``), whose next jobs are then promoted. A fed job due
        again from the retry set rejoins the front of its feed's held jobs, if the feed still
        exists, and the feed releases."""
        moves: list[dict[str, Any]] = []
        drops: list[dict[str, Any]] = []
        lanes: dict[str, LaneOf] = {}
        fed = {str(c[4]) for c in changes if c[4] is not None and c[2] is not None and state == RETRY}
        # Feeds first: they are locked before any concurrency key.
        live = {str(f.task_id) for f in self.feeds.lock(tx.connection, fed)} if fed else set()
        fronts: dict[str, int] = {}
        for row_id, old, rewritten, lined, feed in changes:
            if rewritten is not None and feed in live:
                job, encoded = rewritten
                front = {"id": row_id, "state": state, "old": old, "payload": encoded, "queue": job["queue"]}
                held = tx.connection.execute(self.feeds.statements.to_front, {**front, "jid": jid(job)})
                fronts[str(feed)] = fronts.get(str(feed), 0) + int(held.rowcount)
                continue
            if lined and rewritten is not None:
                lane = lane_of(rewritten[0])
                if lane is not None:
                    lanes[lane.digest] = lane
            if rewritten is None:
                drops.append({"id": row_id, "state": state, "old": old})
                continue
            job, encoded = rewritten
            moves.append(
                {
                    "id": row_id,
                    "state": state,
                    "old": old,
                    "now": now,
                    "payload": encoded,
                    "queue": job["queue"],
                    "jid": jid(job),
                    "priority": priority(job),
                }
            )
        if drops:
            tx.connection.execute(self.store.sql.sets.drop_due, drops)
        moved = 0
        if moves:
            self.flow.take_lanes(tx.connection, lanes.values())
            # One executemany (pipelined on PostgreSQL); its row count is the sum over the jobs.
            moved = int(tx.connection.execute(self.store.sql.sets.move_due, moves).rowcount)
            if moved:
                tx.announce(move["queue"] for move in moves)
            tx.announce(self.flow.promote(tx.connection, lanes, now))
        if fronts:
            for feed, count in fronts.items():
                self.feeds.add_held(tx.connection, feed, count)
            self.feeds.release(tx, self.feeds.lock(tx.connection, fronts), now, lanes_held=bool(lanes))
            moved += sum(fronts.values())
        return moved


#: A due row: its id, its payload as read (text on PostgreSQL, the stored bytes on SQLite:
#: ``statements.STORED_PAYLOAD``), compared again when it is moved, the rewritten job with
#: its text, or None to drop the row, whether it goes to its key's line (keyed, no slot), and
#: its feed.
Rewritten = tuple[int, str | bytes, tuple[payload.JobDict, str] | None, bool, str | None]


def _job_fields(encoded: str) -> dict[str, Any]:
    """The fields of a job about to be buried; {} for text that is not a JSON object (the
    row keeps the text as it is)."""
    try:
        decoded = json.loads(encoded)
    except (ValueError, RecursionError):
        return {}
    return decoded if isinstance(decoded, dict) else {}
