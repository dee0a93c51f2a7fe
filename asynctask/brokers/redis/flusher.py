"""The flusher: reads the tracking stream and applies it to SQL in batches.

Every worker runs one (in its flusher process, or in a thread of its own); they share the
stream through the consumer group ``flushers``, so each entry goes to one of them. A flusher
applies its batches one after another, in the order it read them; a large batch may be split by
job among a few transactions run at once (``parallel``), each holding all of its jobs'
transitions, and the batch counts as applied when all of them committed. An entry is
acknowledged and deleted only after that. While SQL is down the flusher keeps its batch and
retries with backoff; the transitions wait in Redis, and jobs keep running. A flusher that dies
holding entries loses nothing: after ``CLAIM_IDLE_MS`` another flusher claims them. Applying an
entry twice is harmless (see ``tracking.apply``), so is a batch applied in part before it
failed. A batch the database refuses for its data is applied without what it refuses, which is
set aside (``tracking.isolate``): only connection errors are retried.

A batch that ends tasks with callbacks makes them due in its transaction; the flusher pushes
them once it committed, and every ``CLAIM_EVERY`` pushes any that a flusher which died left due.
Tasks waiting for the tasks it ends go the same way: the batch decides their holds, the flusher
then resumes or drops their feeds (``RedisHolds``). Jobs that a running job added to its task
and that it died before pushing are pushed by the same look (``RedisAdditionPusher``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from asynctask.brokers.redis.additions import RedisAdditionPusher
from asynctask.brokers.redis.callbacks import RedisCallbackPusher
from asynctask.brokers.redis.holds import RedisHolds
from asynctask.keys import Keys
from asynctask.tracking.apply import NOTHING, Applied, apply_transitions, combined
from asynctask.tracking.isolate import apply_isolating, first_line, is_data_error, set_aside
from asynctask.tracking.transitions import Transition, decode_entry

logger = logging.getLogger("asynctask.tracking")

GROUP = "flushers"
#: Stream entries per batch (each holds up to ``outbox.MAX_BATCH`` transitions).
ENTRIES_PER_BATCH = 50
#: Milliseconds a read blocks when the stream is empty.
BLOCK_MS = 100
#: A read that brings fewer entries than this waits ``GATHER_SECONDS`` for more before they are
#: applied: when each job writes its start and its end alone (an RQ work horse), a transaction per
#: entry would cost SQL more than the entries themselves. Busier writers fill batches by themselves
#: and are not held back.
GATHER_BELOW = 4
GATHER_SECONDS = 0.03
#: Entries delivered to a flusher and unacknowledged this long are taken over by another.
CLAIM_IDLE_MS = 60_000
#: Seconds between looks for entries left by dead flushers.
CLAIM_EVERY = 10.0
#: Seconds a stopping flusher spends applying the last entries before leaving them to others.
FINAL_FLUSH_SECONDS = 2.0
#: Transactions a flusher process applies one batch with, by database: PostgreSQL runs them
#: at once, and one prepares its part while PostgreSQL runs another's; SQLite has one writer
#: at a time. A flusher thread in the worker uses one: it shares the GIL with the jobs.
PARALLEL_PARTS = {"postgresql": 3, "sqlite": 1}
#: Transitions a part holds at least: a small batch is one transaction, not several tiny ones.
PART_MIN_TRANSITIONS = 500
#: Backoff (seconds) after a failed batch: doubles from the first value up to the second.
RETRY_BACKOFF = (0.2, 5.0)

Entry = tuple[bytes, dict[bytes, bytes]]


@dataclass(eq=False)
class Flusher:
    conn: redis.Redis
    keys: Keys
    engine: Engine
    consumer: str
    parallel: int = 1
    _parts: ThreadPoolExecutor | None = field(init=False)
    _callbacks: RedisCallbackPusher = field(init=False)
    _holds: RedisHolds | None = field(default=None, init=False)
    _additions: RedisAdditionPusher | None = field(default=None, init=False)
    _stopped: threading.Event = field(default_factory=threading.Event, init=False)
    _group_ready: bool = field(default=False, init=False)
    _next_claim: float = field(default=0.0, init=False)
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        parallel = self.parallel
        self._parts = ThreadPoolExecutor(parallel, "asynctask-tracking-part") if parallel > 1 else None
        self._callbacks = RedisCallbackPusher(self.conn, self.keys)
        self.thread = threading.Thread(target=self.run, name="asynctask-tracking-flusher", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop the thread, then apply what the worker wrote last (its final transitions)."""
        self._stopped.set()
        if self.thread.is_alive():
            self.thread.join()
        try:
            self.flush(deadline=time.monotonic() + FINAL_FLUSH_SECONDS)
        except (SQLAlchemyError, redis.RedisError) as exc:
            logger.warning("tracking entries left for another flusher: %s", _first_line(exc))
        finally:
            if self._parts is not None:
                self._parts.shutdown()

    def run(self) -> None:
        backoff = RETRY_BACKOFF[0]
        pending: list[Entry] = []
        while not self._stopped.is_set():
            try:
                if not pending:
                    pending = self._gathered()
                if pending:
                    self._apply(pending)
                    pending = []
                backoff = RETRY_BACKOFF[0]
            except Exception as exc:
                if isinstance(exc, redis.ResponseError) and "NOGROUP" in str(exc):
                    # The stream was deleted (Redis restarted empty, say): make the group again.
                    self._group_ready = False
                expected = isinstance(exc, SQLAlchemyError | redis.RedisError)
                logger.error(
                    "applying %d tracking entries failed: %s; retrying in %.1f s",
                    len(pending),
                    _first_line(exc),
                    backoff,
                    # An outage is explained by its message; anything else is a bug: show where.
                    exc_info=None if expected else exc,
                    extra={"fields": {"error": type(exc).__name__}},
                )
                self._keep(pending)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF[1])

    def flush(self, deadline: float | None = None) -> int:
        """Apply what the stream holds now (until ``deadline``, monotonic); return how many entries."""
        total = 0
        while deadline is None or time.monotonic() < deadline:
            batch = self._read(block=False)
            if not batch:
                break
            self._apply(batch)
            total += len(batch)
        return total

    def _gathered(self) -> list[Entry]:
        """The next batch: what one blocking read brings, and, when that is only a few entries,
        what arrives in the ``GATHER_SECONDS`` after it."""
        batch = self._read(block=True)
        if 0 < len(batch) < GATHER_BELOW and not self._stopped.wait(GATHER_SECONDS):
            batch += self._read(block=False)
        return batch

    def _read(self, *, block: bool) -> list[Entry]:
        self._ensure_group()
        if time.monotonic() >= self._next_claim:
            self._next_claim = time.monotonic() + CLAIM_EVERY
            self._follow_up(NOTHING, every=True)
            orphans = self._claim_orphans()
            if orphans:
                return orphans
        reply = self.conn.xreadgroup(
            GROUP,
            self.consumer,
            {self.keys.tracking_stream: ">"},
            count=ENTRIES_PER_BATCH,
            block=BLOCK_MS if block else None,
        )
        if not reply:
            return []
        return list(cast(Any, reply)[0][1])

    def _claim_orphans(self) -> list[Entry]:
        reply = cast(
            Any,
            self.conn.xautoclaim(
                self.keys.tracking_stream, GROUP, self.consumer, CLAIM_IDLE_MS, "0-0", count=ENTRIES_PER_BATCH
            ),
        )
        entries = [entry for entry in reply[1] if entry[1]]
        if entries:
            logger.warning("took over %d tracking entries from a stopped flusher", len(entries))
        return entries

    def _apply(self, entries: Sequence[Entry]) -> None:
        batch: list[Transition] = []
        malformed: list[tuple[str | None, bytes, str]] = []
        for entry_id, fields in entries:
            try:
                batch.extend(decode_entry(int(fields[b"s"]), fields[b"d"]))
            except (KeyError, ValueError) as exc:
                # Applying it can never succeed; keeping it would stop every later transition.
                malformed.append((None, fields.get(b"d", b""), f"malformed entry {entry_id.decode()}: {exc}"))
        parts = self._split(batch)
        done: list[Applied] = []
        if self._parts is None or len(parts) == 1:
            done.append(self._apply_part(batch, malformed))
        else:
            running = [
                self._parts.submit(self._apply_part, part, malformed if n == 0 else ())
                for n, part in enumerate(parts)
            ]
            # Every part ended before the batch is acknowledged, or retried: a retry never runs
            # beside a part of the same batch still under way.
            wait(running)
            done.extend(part.result() for part in running)
        ids = [entry_id for entry_id, _ in entries]
        pipe = self.conn.pipeline(transaction=True)
        pipe.xack(self.keys.tracking_stream, GROUP, *ids)
        pipe.xdel(self.keys.tracking_stream, *ids)
        pipe.execute()
        together = combined(done)
        if together.due or together.holds:
            self._follow_up(together)

    def _follow_up(self, applied: Applied, *, every: bool = False) -> None:
        """Push the callbacks the batch made due and act on the holds it decided (``every``:
        any that a process left due). Failing costs the batch nothing: they stay due for the
        next look."""
        try:
            if applied.due or every:
                self._callbacks.push_due(self.engine, applied.due or None)
        except (SQLAlchemyError, redis.RedisError) as exc:
            logger.warning("task callbacks left due for the next look: %s", _first_line(exc))
        try:
            if applied.holds or every:
                if self._holds is None:
                    self._holds = RedisHolds(self.conn, self.keys)
                self._holds.release_due(self.engine, applied.holds or None)
        except (SQLAlchemyError, redis.RedisError) as exc:
            logger.warning("held tasks left due for the next look: %s", _first_line(exc))
        if every:
            self._push_additions()

    def _push_additions(self) -> None:
        """Push the jobs that running jobs added to their tasks and left due (each job pushes
        its own: only one that died after its commit leaves any)."""
        try:
            if self._additions is None:
                self._additions = RedisAdditionPusher(self.conn, self.keys)
            self._additions.push_due(self.engine)
        except (SQLAlchemyError, redis.RedisError) as exc:
            logger.warning("added jobs left due for the next look: %s", _first_line(exc))

    def _split(self, batch: list[Transition]) -> list[list[Transition]]:
        """``batch`` in parts by job (a job's transitions all in one part), as many as
        ``parallel`` allows and ``PART_MIN_TRANSITIONS`` fills."""
        count = min(self.parallel, len(batch) // PART_MIN_TRANSITIONS)
        if count <= 1:
            return [batch]
        parts: list[list[Transition]] = [[] for _ in range(count)]
        for transition in batch:
            parts[hash(transition.jid) % count].append(transition)
        return [part for part in parts if part]

    def _apply_part(
        self, batch: Sequence[Transition], malformed: Sequence[tuple[str | None, bytes, str]]
    ) -> Applied:
        """Apply one part in a transaction; return what it changed."""
        try:
            return self._write(apply_transitions, batch, malformed)
        except Exception as exc:
            if not is_data_error(exc):
                raise
            logger.warning(
                "the database refused %d tracking transitions for their data (%s); "
                "applying them without what it refuses",
                len(batch),
                first_line(exc),
            )
            return self._write(apply_isolating, batch, malformed)

    def _write(
        self,
        apply: Callable[[Connection, Sequence[Transition]], Applied],
        batch: Sequence[Transition],
        malformed: Sequence[tuple[str | None, bytes, str]],
    ) -> Applied:
        """One transaction: ``batch`` applied, the ``malformed`` entries set aside; what it
        changed."""
        with self.engine.begin() as connection:
            applied = apply(connection, batch)
            set_aside(connection, malformed)
        return applied

    def _keep(self, entries: Sequence[Entry]) -> None:
        """Reset the entries' idle time, so that others do not take over a batch we retry."""
        if not entries:
            return
        try:
            self.conn.xclaim(
                self.keys.tracking_stream, GROUP, self.consumer, 0, [e[0] for e in entries], justid=True
            )
        except redis.RedisError:
            # Redis is down too; the entries stay ours until it is back or we are gone.
            pass

    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            self.conn.xgroup_create(self.keys.tracking_stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
