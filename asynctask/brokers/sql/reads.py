"""The read model's primitives on the SQL broker's tables (SQLite and PostgreSQL).

A queue is its rows in state ``queued`` that no worker has claimed (``locked_by`` NULL): a
claimed job is in flight, as on Redis where it moved to an in-flight list. The next job of a
queue is its lowest (priority, id). The sets are the rows in state ``scheduled``, ``retry``,
``dead`` and ``stopped``, scored by ``run_at``, ordered by (run_at, id).

Every action on an entry is one conditional statement on the row's id, state and score; its
row count says whether the entry was still there, so a click racing the poller or another
click moves a job once or not at all.

An action that removes jobs (delete, clear, kill, park) ends them for flow control: their
unique holds are released and their keys' slots go to the next jobs of the keys' lines, and
their feeds release (a fed task's held jobs are not in any queue or set, so no action reaches
them), in the action's transaction. A job moved back to a queue that holds no slot of its key
(dead, stopped, or retrying with ``concurrency_on_failure="continue"``) enters its key's line
instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    TextClause,
    and_,
    case,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import InstrumentedAttribute

from asynctask import payload
from asynctask.brokers.periodic import PeriodicStore
from asynctask.brokers.reads import (
    BusyKey,
    Move,
    ProcessRecord,
    ReadBackend,
    Scored,
    SetName,
    Snapshot,
    Stored,
    WorkEntry,
)
from asynctask.brokers.sql.broker import SqlBroker
from asynctask.brokers.sql.flow import LANE_MARK, decoded, lane_of
from asynctask.brokers.sql.models import (
    DEAD,
    HELD,
    LANE,
    QUEUED,
    RETRY,
    SCHEDULED,
    STOPPED,
    Lane,
    PausedQueue,
    ProcessSignal,
    QueuedJob,
    StatCounter,
    UniqueHold,
    WorkerProcess,
)
from asynctask.brokers.sql.predicates import CLAIMABLE, IN_A_SET
from asynctask.brokers.sql.transactions import Tx
from asynctask.settings import Settings

J = QueuedJob
P = WorkerProcess

#: A WHERE term: an expression, or literal SQL.
Condition = ColumnElement[bool] | TextClause

#: Entries read per round trip by a scan for a text.
SCAN_PAGE = 100
#: The lifetime counters' names.
_TOTALS = ("processed", "failed")

STATES: dict[SetName, str] = {"schedule": SCHEDULED, "retry": RETRY, "dead": DEAD, "stopped": STOPPED}

# The partial indexes' own predicates, as literals (see ``statements``).
_WAITING = text(CLAIMABLE)
_IN_SETS = text(IN_A_SET)


def _in_set(name: SetName) -> ColumnElement[bool]:
    return and_(_IN_SETS, text(f"state = '{STATES[name]}'"))


class SqlReader(ReadBackend):
    def __init__(self, engine: Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        # The broker itself, its transactions (with their wake-ups of idle workers) and its
        # statements where the reader does what the broker does, so that both agree exactly.
        self._broker = SqlBroker(settings, engine)
        self._store = self._broker.store
        self._sql = self._store.sql
        self._flow = self._broker.flow
        self._feeds = self._broker.feeds

    @property
    def periodic(self) -> PeriodicStore:
        return self._broker.periodic

    # Queues.

    def queue_key(self, name: str) -> str:
        return f"queue:{name}"

    def queue_names(self) -> list[str]:
        """Queues holding jobs, waiting or in flight, and the paused ones (Redis instead keeps
        every name pushed to in its ``queues`` set until the queue is cleared)."""
        holding = select(J.queue).where(text(f"state = '{QUEUED}'"))
        with self._store.read() as conn:
            names = set(conn.scalars(holding.union(select(PausedQueue.queue))))
        # Sorted here: the database's collation may not be code-point order.
        return sorted(names)

    def queue_pause(self, name: str, paused: bool) -> None:
        insert_ = postgresql.insert if self._sql.postgres else sqlite.insert
        with self._store.write() as tx:
            if paused:
                tx.connection.execute(
                    insert_(PausedQueue)
                    .values(queue=name, paused_at=payload.now())
                    .on_conflict_do_nothing(index_elements=[PausedQueue.queue])
                )
                return
            resumed = tx.connection.execute(delete(PausedQueue).where(PausedQueue.queue == name))
            if resumed.rowcount:
                # Its jobs are claimable again: wake the idle workers as a push would.
                tx.announce([name])

    def queue_paused(self, name: str) -> bool:
        query = select(PausedQueue.queue).where(PausedQueue.queue == name)
        with self._store.read() as conn:
            return conn.scalar(query) is not None

    def queue_size(self, name: str) -> int:
        query = select(func.count()).select_from(J).where(J.queue == name, _WAITING)
        with self._store.read() as conn:
            return int(conn.scalar(query) or 0)

    def queue_latency(self, name: str) -> float:
        # run_at of a queued row is when it was enqueued.
        query = select(func.min(J.run_at)).where(J.queue == name, _WAITING)
        with self._store.read() as conn:
            return _since(conn.scalar(query))

    def queue_rows(self, name: str, page_size: int) -> Iterator[Stored]:
        # In the reverse of the fetch order, the order a Redis list is read in.
        rows = self._pages(page_size, J.priority, J.queue == name, _WAITING)
        return (Stored(row.payload.encode(), row.id) for row in rows)

    def queue_candidates(self, name: str, jid: str) -> Iterator[Stored]:
        query = select(J.id, J.payload).where(J.queue == name, _WAITING, J.jid == jid).order_by(J.id)
        with self._store.read() as conn:
            rows = conn.execute(query).all()
        return iter([Stored(row.payload.encode(), row.id) for row in rows])

    def queue_delete(self, name: str, job: Stored) -> bool:
        where = _one_row(job.ref, job.raw, J.queue == name, _WAITING)
        if where is None:
            return False
        with self._store.write() as tx, self._ending(tx, *where):
            return tx.connection.execute(delete(J).where(*where)).rowcount > 0

    def queue_clear(self, name: str) -> int:
        where = (J.queue == name, _WAITING)
        with self._store.write() as tx, self._ending(tx, *where):
            return int(tx.connection.execute(delete(J).where(*where)).rowcount)

    # Sets.

    def set_key(self, name: SetName) -> str:
        return name

    def set_size(self, name: SetName) -> int:
        query = select(func.count()).select_from(J).where(_in_set(name))
        with self._store.read() as conn:
            return int(conn.scalar(query) or 0)

    def set_rows(self, name: SetName, page_size: int) -> Iterator[Scored]:
        return map(_scored, self._pages(page_size, J.run_at, _in_set(name)))

    def _pages(self, page_size: int, key: InstrumentedAttribute[Any], *where: Condition) -> Iterator[Any]:
        """Rows (id, run_at, priority, payload) by descending (key, id), in keyset pages that
        continue after the last row read: rows added or removed meanwhile shift nothing, and
        no row is read twice."""
        after: tuple[Any, int] | None = None
        while True:
            query = (
                select(J.id, J.run_at, J.priority, J.payload)
                .where(*where)
                .order_by(key.desc(), J.id.desc())
                .limit(page_size)
            )
            if after is not None:
                value, row_id = after
                query = query.where(or_(key < value, and_(key == value, J.id < row_id)))
            with self._store.read() as conn:
                rows = conn.execute(query).all()
            if not rows:
                return
            yield from rows
            after = (getattr(rows[-1], key.key), rows[-1].id)

    def set_page(self, name: SetName, start: int, count: int) -> list[Scored]:
        query = (
            select(J.id, J.run_at, J.payload)
            .where(_in_set(name))
            .order_by(J.run_at, J.id)
            .offset(start)
            .limit(count)
        )
        with self._store.read() as conn:
            return [_scored(row) for row in conn.execute(query)]

    def set_scan(self, name: SetName, text_: str) -> Iterator[Scored]:
        # LIKE ignores ASCII case in SQLite; Redis's MATCH does not, nor do these.
        position = func.strpos if self._sql.postgres else func.instr
        return map(_scored, self._pages(SCAN_PAGE, J.run_at, _in_set(name), position(J.payload, text_) > 0))

    def set_candidates(self, name: SetName, jid: str) -> Iterator[Scored]:
        query = select(J.id, J.run_at, J.payload).where(_in_set(name), J.jid == jid).order_by(J.run_at, J.id)
        with self._store.read() as conn:
            rows = conn.execute(query).all()
        return iter([_scored(row) for row in rows])

    def set_range(self, name: SetName, low: float, high: float) -> list[Scored]:
        query = (
            select(J.id, J.run_at, J.payload)
            .where(_in_set(name), J.run_at >= low, J.run_at <= high)
            .order_by(J.run_at, J.id)
        )
        with self._store.read() as conn:
            return [_scored(row) for row in conn.execute(query)]

    def set_delete(self, name: SetName, entry: Scored) -> bool:
        where = _one_row(entry.ref, entry.raw, _in_set(name), J.run_at == entry.score)
        if where is None:
            return False
        with self._store.write() as tx, self._ending(tx, *where):
            return tx.connection.execute(delete(J).where(*where)).rowcount > 0

    def set_clear(self, name: SetName) -> int:
        with self._store.write() as tx, self._ending(tx, _in_set(name)):
            return int(tx.connection.execute(delete(J).where(_in_set(name))).rowcount)

    def set_enqueue(self, name: SetName, moves: Sequence[Move], now: float) -> int:
        """Each row moves if it is still the entry read; idle workers on PostgreSQL are woken
        as they are for any new job. A fed task's job whose feed exists rejoins the front of
        its feed's held jobs instead, and the feed releases."""
        moved = 0
        queues: set[str] = set()
        lanes: set[str] = set()
        fronts: dict[str, int] = {}
        with self._store.write() as tx:
            conn = tx.connection
            for move in moves:
                entry = move.entry
                where = _one_row(entry.ref, entry.raw, _in_set(name), J.run_at == entry.score)
                if where is None:
                    continue
                # The row first, then its feed or its key (the order the poller locks them in).
                found = conn.execute(select(J.lane, J.feed).where(*where).with_for_update()).first()
                lane, feed = (None, None) if found is None else found
                if feed is not None and self._feeds.lock(conn, [feed]):
                    held = {"state": HELD, "queue": move.queue, "run_at": 0.0, "payload": move.replacement}
                    if conn.execute(update(J).where(*where).values(held)).rowcount:
                        moved += 1
                        fronts[feed] = fronts.get(feed, 0) + 1
                    continue
                if lane is not None:
                    self._lock_lane(conn, lane, move.replacement)
                    lanes.add(lane)
                values = {
                    "state": case((and_(J.lane.is_not(None), J.holds.is_(False)), LANE), else_=QUEUED),
                    "queue": move.queue,
                    "run_at": now,
                    "payload": move.replacement,
                    "locked_by": None,
                    "locked_at": None,
                }
                if conn.execute(update(J).where(*where).values(values)).rowcount:
                    moved += 1
                    queues.add(move.queue)
            tx.announce(queues)
            tx.announce(self._flow.promote(conn, lanes, now))
            for feed, count in fronts.items():
                self._feeds.add_held(conn, feed, count)
            self._feeds.release(tx, self._feeds.lock(conn, fronts), now, lanes_held=bool(lanes))
        return moved

    def set_kill(self, name: SetName, entries: Sequence[Scored], now: float) -> int:
        moved = 0
        with self._store.write() as tx:
            conn = tx.connection
            for entry in entries:
                where = _one_row(entry.ref, entry.raw, _in_set(name), J.run_at == entry.score)
                if where is not None:
                    with self._ending(tx, *where):
                        dead = update(J).where(*where).values(state=DEAD, run_at=now, holds=False)
                        moved += conn.execute(dead).rowcount
            if moved:
                self._trim_dead(conn, now)
        return moved

    # Stopping jobs that wait.

    def queue_park(self, name: str, job: Stored, encoded: str, now: float) -> bool:
        return self._park(_one_row(job.ref, job.raw, J.queue == name, _WAITING), encoded, now)

    def set_park(self, name: SetName, entry: Scored, encoded: str, now: float) -> bool:
        return self._park(
            _one_row(entry.ref, entry.raw, _in_set(name), J.run_at == entry.score), encoded, now
        )

    def _park(self, where: list[Condition] | None, encoded: str, now: float) -> bool:
        """Move the row ``where`` selects to the stopped set as ``encoded``, ending it as a
        delete does (``_ending``); it keeps its key, so a resume sends it through its line."""
        if where is None:
            return False
        stopped = {"state": STOPPED, "run_at": now, "payload": encoded, "holds": False}
        with self._store.write() as tx, self._ending(tx, *where):
            return tx.connection.execute(update(J).where(*where).values(stopped)).rowcount > 0

    def _lock_lane(self, conn: Connection, lane: str, replacement: str) -> None:
        """Lock the key of a job moving back to its queue, recreating it from the job (with
        the job's limit) if the sweep forgot it while the job was in a set."""
        job = decoded(replacement, LANE_MARK)
        found = None if job is None else lane_of(job)
        if found is not None and found.digest == lane:
            self._flow.take_lanes(conn, [found])
        else:
            self._flow.lock_lanes(conn, [lane])

    @contextmanager
    def _ending(self, tx: Tx, *where: Condition) -> Iterator[None]:
        """Around a statement that ends the rows ``where`` selects: lock their feeds, release
        the unique keys their jobs hold, lock their concurrency keys; after it, promote from
        those keys and release from those feeds."""
        conn = tx.connection
        fed = conn.scalars(select(J.feed).where(*where, J.feed.is_not(None)).distinct())
        feeds = self._feeds.lock(conn, [str(feed) for feed in fed])
        conn.execute(delete(UniqueHold).where(UniqueHold.jid.in_(select(J.jid).where(*where))))
        found = conn.scalars(select(J.lane).where(*where, J.lane.is_not(None)).distinct())
        lanes = sorted(str(lane) for lane in found)
        self._flow.lock_lanes(conn, lanes)
        yield
        tx.announce(self._flow.promote(conn, lanes))
        self._feeds.release(tx, feeds, payload.now(), lanes_held=bool(lanes))

    # Concurrency keys.

    def busy_keys(self, limit: int) -> list[BusyKey]:
        """Keys with slot holders or waiting jobs, most waiting first (then most holders).
        One probe of the line and holder indexes per key."""
        waiting = (
            select(func.count()).where(J.lane == Lane.digest, text(f"state = '{LANE}'")).scalar_subquery()
        )
        holding = select(func.count()).where(J.lane == Lane.digest, J.holds).scalar_subquery()
        busy = select(
            Lane.digest, Lane.key, Lane.lim, waiting.label("waiting"), holding.label("holding")
        ).subquery()
        query = (
            select(busy)
            .where(or_(busy.c.waiting > 0, busy.c.holding > 0))
            .order_by(busy.c.waiting.desc(), busy.c.holding.desc(), busy.c.key)
            .limit(limit)
        )
        with self._store.read() as conn:
            keys = conn.execute(query).all()
            digests = [row.digest for row in keys]
            holders: dict[str, list[str]] = {d: [] for d in digests}
            if digests:
                found = select(J.lane, J.jid).where(J.holds, J.lane.in_(digests)).order_by(J.id)
                for lane, jid in conn.execute(found):
                    holders[str(lane)].append(jid)
        return [
            BusyKey(key=row.key, limit=int(row.lim), holders=holders[row.digest], waiting=int(row.waiting))
            for row in keys
        ]

    def dead_add(self, encoded: bytes | str, now: float) -> None:
        # Exactly the broker's burial of a job (its row, then the trim).
        self._broker.kill(None, encoded.decode() if isinstance(encoded, bytes) else encoded)

    def _trim_dead(self, conn: Connection, now: float) -> None:
        """Sidekiq's trim, by the broker's statements: drop dead jobs older than dead_timeout,
        then all but the newest dead_max_jobs."""
        s = self.settings
        conn.execute(self._sql.sets.trim_dead_by_age, {"cutoff": now - s.dead_timeout})
        conn.execute(self._sql.sets.trim_dead_by_count, {"keep": s.dead_max_jobs})

    # Processes: rows of asynctask_process whose heartbeat has not expired, by the clock the
    # broker writes ``expires_at`` with (PostgreSQL's own; on SQLite, this host's).

    def _alive(self) -> TextClause:
        alive = text(f"expires_at > {self._sql.expiry_now}")
        return alive if self._sql.postgres else alive.bindparams(now=payload.now())

    def processes(self) -> list[ProcessRecord]:
        query = _process_query().where(self._alive()).order_by(P.identity)
        with self._store.read() as conn:
            return [_process(row) for row in conn.execute(query)]

    def process(self, identity: str) -> ProcessRecord | None:
        query = _process_query().where(P.identity == identity, self._alive())
        with self._store.read() as conn:
            row = conn.execute(query).first()
        return None if row is None else _process(row)

    def signal(self, identity: str, name: str) -> None:
        with self._store.write() as tx:
            tx.connection.execute(insert(ProcessSignal).values(identity=identity, signal=name))

    def cleanup_processes(self) -> int:
        """Delete expired process rows (a worker still takes back their jobs: a process
        without a row is dead) and the signals no live process will pop."""
        clock = {"now": payload.now()}
        with self._store.write() as tx:
            conn = tx.connection
            removed = conn.execute(self._sql.processes.forget_dead_processes, clock).rowcount
            conn.execute(self._sql.processes.forget_orphan_signals)
        return int(removed)

    def work(self) -> list[WorkEntry]:
        query = select(P.identity, P.work).where(self._alive()).order_by(P.identity)
        with self._store.read() as conn:
            rows = conn.execute(query).all()
        return [entry for row in rows for entry in _work(row.identity, row.work)]

    def busy(self) -> int:
        query = select(func.coalesce(func.sum(P.busy), 0)).where(self._alive())
        with self._store.read() as conn:
            return int(conn.scalar(query) or 0)

    # Counters: asynctask_stat rows ``processed``, ``failed`` and their daily ``:YYYY-MM-DD`` rows.

    def stats(self, default_queue: str) -> Snapshot:
        """Four statements, whatever the number of queues and processes."""
        now = payload.now()
        waiting = case((J.locked_by.is_(None), 1), else_=0)
        waiting_since = case((J.locked_by.is_(None), J.run_at))
        with self._store.read() as conn:
            counters = _pairs(
                conn, select(StatCounter.name, StatCounter.value).where(StatCounter.name.in_(_TOTALS))
            )
            sets = _pairs(conn, select(J.state, func.count()).where(_IN_SETS).group_by(J.state))
            queues = conn.execute(
                select(J.queue, func.sum(waiting), func.min(waiting_since))
                .where(text(f"state = '{QUEUED}'"))
                .group_by(J.queue)
            ).all()
            processes, busy = conn.execute(
                select(func.count(), func.coalesce(func.sum(P.busy), 0)).where(self._alive())
            ).one()
        sizes = {str(queue): int(size) for queue, size, _ in queues}
        oldest = {str(queue): since for queue, _, since in queues}
        return Snapshot(
            processed=int(counters.get("processed", 0)),
            failed=int(counters.get("failed", 0)),
            scheduled_size=int(sets.get(SCHEDULED, 0)),
            retry_size=int(sets.get(RETRY, 0)),
            dead_size=int(sets.get(DEAD, 0)),
            stopped_size=int(sets.get(STOPPED, 0)),
            processes_size=int(processes),
            workers_size=int(busy),
            default_queue_latency=_since(oldest.get(default_queue), now),
            queues=dict(sorted(sizes.items(), key=lambda item: (-item[1], item[0]))),
        )

    def reset_stats(self, names: Sequence[str]) -> None:
        insert_ = postgresql.insert if self._sql.postgres else sqlite.insert
        with self._store.write() as tx:
            conn = tx.connection
            for name in names:
                conn.execute(
                    insert_(StatCounter)
                    .values(name=name, value=0)
                    .on_conflict_do_update(index_elements=[StatCounter.name], set_={"value": 0})
                )

    def history(self, days: Sequence[date]) -> tuple[list[int], list[int]]:
        processed = [f"processed:{d:%Y-%m-%d}" for d in days]
        failed = [f"failed:{d:%Y-%m-%d}" for d in days]
        query = select(StatCounter.name, StatCounter.value).where(StatCounter.name.in_(processed + failed))
        with self._store.read() as conn:
            counts = _pairs(conn, query)
        return [int(counts.get(n, 0)) for n in processed], [int(counts.get(n, 0)) for n in failed]

    def tracking_backlog(self) -> None:
        return None


def _pairs(conn: Connection, query: Select[str, int]) -> dict[str, int]:
    return {str(name): int(value) for name, value in conn.execute(query)}


def _one_row(ref: int | None, raw: bytes, *where: Condition) -> list[Condition] | None:
    """Conditions naming one row: its id, or, for a job not read from this store (no id), the
    first row holding exactly these bytes, as Redis names members. None: no row can match."""
    if ref is not None:
        return [J.id == ref, *where]
    try:
        stored = raw.decode()
    except UnicodeDecodeError:
        return None
    same = select(J.id).where(J.payload == stored, *where).order_by(J.id).limit(1).scalar_subquery()
    return [J.id == same, *where]


def _scored(row: Any) -> Scored:
    return Scored(row.payload.encode(), float(row.run_at), int(row.id))


def _since(moment: float | None, now: float | None = None) -> float:
    if moment is None:
        return 0.0
    return max(0.0, (payload.now() if now is None else now) - moment)


def _process_query() -> Select[str, str, int, float, bool, int, int, int]:
    return select(P.identity, P.info, P.busy, P.beat, P.quiet, P.rss, P.rtt_us, P.loop_lag_us)


def _process(row: Any) -> ProcessRecord:
    return ProcessRecord(
        identity=row.identity,
        info=row.info,
        busy=int(row.busy or 0),
        beat=row.beat,
        quiet=bool(row.quiet),
        rss=int(row.rss or 0),
        rtt_us=int(row.rtt_us or 0),
        loop_lag_us=int(row.loop_lag_us or 0),
    )


def _work(identity: str, stored: str) -> list[WorkEntry]:
    """The thread id -> job JSON object; a column that is not one is listed as one unreadable
    entry rather than hidden (as Redis lists unreadable hash values)."""
    try:
        threads = json.loads(stored)
    except ValueError:
        threads = None
    if not isinstance(threads, dict):
        return [WorkEntry(identity, "", stored)]
    return [
        WorkEntry(identity, str(tid), value if isinstance(value, str) else json.dumps(value))
        for tid, value in threads.items()
    ]
