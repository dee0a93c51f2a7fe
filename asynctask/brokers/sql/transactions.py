"""The SQL broker's database: its engine, its transactions, and tracking writes inside them.

Every write is one short transaction. On SQLite it begins with ``BEGIN IMMEDIATE`` (several
processes on one file queue for the lock instead of failing halfway), and the threads of one
process take a process-wide lock first: SQLite's busy handler sleeps in steps of up to 100 ms,
so threads that met at the file lock would idle where a mutex hands over at once.

A transaction that makes jobs claimable announces their queues: PostgreSQL NOTIFYs (delivered
at commit), SQLite rings a bell in this process after the commit (other processes poll).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import psycopg
from sqlalchemy import Connection, Engine, TextClause
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from asynctask.brokers.sql.predicates import JOB_COLUMNS
from asynctask.brokers.sql.statements import Statements
from asynctask.brokers.sql.wake import Bell
from asynctask.db.engine import autocommit, writer
from asynctask.tracking.apply import apply_transitions
from asynctask.tracking.isolate import BatchRefused, apply_isolating, first_line, is_data_error
from asynctask.tracking.outbox import pack
from asynctask.tracking.transitions import Transition, decode_entry

logger = logging.getLogger("asynctask.broker")

#: Planner settings for the rest of a transaction (``index_order``). A fair claim reads its rows
#: in the order of an index, but another index also finds them unordered, and a sort of all a
#: queue's waiting rows then looks as cheap as the ordered read whenever the planner thinks the
#: queue short: on a table without statistics (never analyzed, or truncated) it took that plan,
#: and a claim of 10 jobs sorted all 40,000 waiting. Without sorts the ordered read is the only
#: plan left; JIT is off because the penalty of the sort that remains (the claim's final order,
#: of a few rows) would otherwise make PostgreSQL compile the statement.
_NO_SORTS = "set_config('enable_sort', 'off', true), set_config('jit', 'off', true)"
_GENERIC_PLANS = "set_config('plan_cache_mode', 'force_generic_plan', true)"
#: The settings statement of a pipelined transaction (pipeline mode runs one statement per call),
#: without and with ``_NO_SORTS``.
_PIPELINE_SETTINGS = {False: f"SELECT {_GENERIC_PLANS}", True: f"SELECT {_GENERIC_PLANS}, {_NO_SORTS}"}

#: A job row, in ``statements.JOB_COLUMNS`` order.
JobRow = tuple[str, str, str, int, float, str, str | None, str | None, bool]


class CallbacksInTransaction(Protocol):
    def push_in(self, connection: Connection, ids: Sequence[int]) -> int:
        """Push the due callbacks ``ids`` in the caller's transaction; return how many."""
        ...


class HoldsInTransaction(Protocol):
    def release_in(self, connection: Connection, ids: Sequence[str] | None) -> int:
        """Release or drop the held jobs of tasks ``ids`` whose holds are due (None: any), in the
        caller's transaction; return how many."""
        ...


class MissingTables(SQLAlchemyError):
    """The database has no AsyncTask tables: it was never migrated."""


@dataclass
class Tx:
    """One write transaction, the queues it makes jobs claimable in, and what to do once it
    committed."""

    connection: Connection
    queues: set[str] = field(default_factory=set)
    #: Steps run after the commit, each in transactions of its own; best effort (``Store.write``).
    after_commit: list[Callable[[], object]] = field(default_factory=list)

    def announce(self, queues: Iterable[str]) -> None:
        self.queues.update(queues)


@dataclass(frozen=True)
class _SqliteFile:
    lock: threading.Lock
    bell: Bell


_files: dict[str, _SqliteFile] = {}
_files_lock = threading.Lock()


def _sqlite_file(path: str) -> _SqliteFile:
    """The lock and bell every broker of this process shares for one SQLite file."""
    with _files_lock:
        found = _files.get(path)
        if found is None:
            found = _files[path] = _SqliteFile(threading.Lock(), Bell())
        return found


class Store:
    #: What a call to the database raises when it fails (the database down, a lost connection).
    errors = (SQLAlchemyError, OSError)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sql = Statements(engine.dialect.name)
        self.postgres = self.sql.postgres
        self._writer = writer(engine)
        self._autocommit = autocommit(engine)
        #: Statements as the driver takes them, for ``pipelined``.
        self._compiled_text: dict[TextClause, str] = {}
        #: Set once the database refused a batch's data: batches are applied under savepoints.
        self._isolating = False
        #: Pushes the callbacks of the tasks a ``record`` ends (set by the broker).
        self.callbacks: CallbacksInTransaction | None = None
        #: Releases or drops the held jobs of tasks whose parents a ``record`` ends (set by the broker).
        self.holds: HoldsInTransaction | None = None
        if self.postgres:
            self._serial: threading.Lock | None = None
            self.bell: Bell | None = None
        else:
            database = engine.url.database
            # One file, however its URL spells it (relative to the working directory or not).
            path = os.path.abspath(database) if database and database != ":memory:" else ":memory:"
            shared = _sqlite_file(path)
            # A lock held across awaited statements would stop an event loop for every other
            # coroutine: an asyncio engine's writers wait for each other in SQLite's busy
            # timeout instead, on the driver's own thread.
            self._serial = None if engine.dialect.is_async else shared.lock
            self.bell = shared.bell

    @contextmanager
    def write(self, *, single_statement: bool = False) -> Iterator[Tx]:
        """One write transaction. ``single_statement``: the block runs one statement, which
        PostgreSQL runs atomically without BEGIN and COMMIT (two round trips fewer)."""
        with self._missing_tables():
            if self._serial is not None:
                self._serial.acquire()
            try:
                opened: AbstractContextManager[Connection] = (
                    self._autocommit.connect() if self.postgres and single_statement else self._writer.begin()
                )
                with opened as connection:
                    tx = Tx(connection)
                    yield tx
                    self.notify(connection, tx.queues)
            finally:
                if self._serial is not None:
                    self._serial.release()
        if tx.queues and self.bell is not None:
            self.bell.ring()
        for step in tx.after_commit:
            # The transaction's own work is committed and its result is the caller's: a step
            # that fails is left to whatever the step was told to leave it to (logged here).
            try:
                step()
            except self.errors as exc:
                logger.warning("a step after a commit failed (it is left for later): %s", exc)

    def pipelined(
        self, steps: Sequence[tuple[TextClause, dict[str, Any]]], *, index_order: bool = False
    ) -> list[tuple[Any, ...]]:
        """PostgreSQL: run ``steps`` in one transaction, in one round trip (pipeline mode:
        BEGIN, the statements in order, COMMIT); return the last statement's rows. The server
        runs each statement after the one before ends, each with its own snapshot.
        ``index_order``: plan them without sorts (``_NO_SORTS``)."""
        with self._missing_tables(), self._autocommit.connect() as connection:
            raw: Any = connection.connection.driver_connection  # psycopg's connection
            try:
                return self._in_pipeline(raw, steps, index_order, own_transaction=True)
            except BaseException:
                # A failed statement leaves the transaction open and aborted on the server. A
                # broken connection cannot roll back: the pool's ping replaces it at its next use.
                with suppress(psycopg.Error):
                    raw.rollback()
                raise

    def pipelined_within(
        self, connection: Connection, steps: Sequence[tuple[TextClause, dict[str, Any]]], *, index_order: bool
    ) -> list[tuple[Any, ...]]:
        """PostgreSQL: run ``steps`` in the transaction open on ``connection``, in one round trip,
        as ``pipelined`` does; the settings last until that transaction ends. On an error the
        transaction is left to its owner, which rolls it back."""
        with self._missing_tables():
            return self._in_pipeline(connection.connection.driver_connection, steps, index_order)

    def _in_pipeline(
        self,
        raw: Any,
        steps: Sequence[tuple[TextClause, dict[str, Any]]],
        index_order: bool,
        *,
        own_transaction: bool = False,
    ) -> list[tuple[Any, ...]]:
        try:
            with raw.pipeline():
                if own_transaction:
                    raw.execute("BEGIN")
                # Each statement is prepared at its first run on the connection and runs its
                # generic plan from then on: psycopg would prepare it at its sixth run only,
                # and PostgreSQL plans the first runs of a prepared statement anew (with an
                # array parameter it can keep doing so); for a claim, planning costs more
                # than running it, and a connection has one claim per number of jobs wanted.
                raw.execute(_PIPELINE_SETTINGS[index_order])
                cursors = [raw.execute(self._compiled(s), params, prepare=True) for s, params in steps]
                if own_transaction:
                    raw.execute("COMMIT")
            return [tuple(row) for row in cursors[-1].fetchall()]
        except psycopg.Error as exc:
            # As SQLAlchemy's, which callers handle (an outage, tables not created).
            raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc

    def _compiled(self, statement: TextClause) -> str:
        found = self._compiled_text.get(statement)
        if found is None:
            found = self._compiled_text[statement] = str(statement.compile(dialect=self.engine.dialect))
        return found

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads that need no transaction."""
        with self._missing_tables(), self._autocommit.connect() as connection:
            yield connection

    def insert_jobs(
        self,
        connection: Connection,
        rows: Sequence[JobRow],
        feed: str | None = None,
        turns: Sequence[int] | None = None,
    ) -> None:
        """Insert job rows; with ``feed``, as that feed's jobs; with ``turns``, a task's jobs
        with their turns (one per row)."""
        if not rows:
            return
        if feed is not None:
            statement = self.sql.push.insert_fed_jobs
        else:
            statement = self.sql.push.insert_jobs if turns is None else self.sql.push.insert_task_jobs
        extra: dict[str, list[Any]] = {}
        if feed is not None:
            extra["feed"] = [feed] * len(rows)
        if feed is not None or turns is not None:
            extra["turn"] = [None] * len(rows) if turns is None else list(turns)
        if self.postgres:
            added = zip(*extra.values(), strict=True) if extra else ((),) * len(rows)
            values = [(*r, *more) for r, more in zip(rows, added, strict=True)]
            connection.execute(statement, {"rows": json.dumps(values)})
        else:
            connection.execute(
                statement,
                [
                    {**dict(zip(JOB_COLUMNS, r, strict=True)), **{k: v[i] for k, v in extra.items()}}
                    for i, r in enumerate(rows)
                ],
            )

    def record(self, connection: Connection, encoded: Sequence[str]) -> None:
        """Number ``encoded`` transitions and apply them to the tracking tables, in the
        caller's transaction (so they commit or roll back with its job change).

        A batch the database refuses for its data costs the caller's transaction (PostgreSQL
        aborts it whole): ``BatchRefused`` tells the caller to retry, as after any database
        error, and from then on batches are applied under savepoints that set aside what is
        refused (``tracking.isolate``). Until then no batch pays for a savepoint."""
        if not encoded:
            return
        transitions = self._numbered(connection, encoded)
        if self._isolating:
            applied = apply_isolating(connection, transitions)
        else:
            try:
                applied = apply_transitions(connection, transitions)
            except Exception as exc:
                if not is_data_error(exc):
                    raise
                self._isolating = True
                raise BatchRefused(f"the database refused tracking transitions: {first_line(exc)}") from exc
        if applied.due and self.callbacks is not None:
            # The tasks these transitions end push their callbacks as they end: same transaction.
            self.callbacks.push_in(connection, applied.due)
        if applied.holds and self.holds is not None:
            self.holds.release_in(connection, applied.holds)

    def tracking_position(self) -> int:
        with self.read() as connection:
            return int(connection.execute(self.sql.position).scalar() or 0)

    def _numbered(self, connection: Connection, encoded: Sequence[str]) -> list[Transition]:
        count = len(encoded)
        if not self.postgres:
            # The counter row is written under the file's write lock: the numbers are contiguous.
            last = int(connection.execute(self.sql.next_seqs, {"n": count}).scalar_one())
            return decode_entry(last - count + 1, pack(encoded))
        # Concurrent transactions draw from the sequence at once: one transaction's numbers
        # are increasing but may have gaps, so each transition gets its own.
        numbers = sorted(int(n) for n in connection.execute(self.sql.next_seqs, {"n": count}).scalars())
        return [replace(t, seq=n) for t, n in zip(decode_entry(0, pack(encoded)), numbers, strict=True)]

    def notify(self, connection: Connection, queues: set[str]) -> None:
        """Wake the workers of ``queues`` when ``connection``'s transaction commits (PostgreSQL;
        SQLite's bell is rung after the commit instead)."""
        if queues and self.sql.notify is not None:
            connection.execute(self.sql.notify, {"queues": sorted(queues)})

    @contextmanager
    def _missing_tables(self) -> Iterator[None]:
        try:
            yield
        except DBAPIError as exc:
            table = _missing_table(exc)
            if table is None:
                raise
            url = self.engine.url.render_as_string(hide_password=True)
            raise MissingTables(
                f"the database {url} has no AsyncTask tables ({table} is missing): "
                "run `asynctask db upgrade` to create them"
            ) from exc


#: SQLite's and PostgreSQL's words for a missing table (or sequence) of ours.
_MISSING = re.compile(r'no such table: (?:\w+\.)?(asynctask_\w+)|relation "(asynctask_\w+)" does not exist')


def _missing_table(exc: DBAPIError) -> str | None:
    """The AsyncTask table or sequence ``exc`` says does not exist, if that is what it says."""
    found = _MISSING.search(str(exc.orig))
    return (found.group(1) or found.group(2)) if found else None
