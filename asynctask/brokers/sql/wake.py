"""How an idle worker learns that jobs arrived, without polling the database hard.

PostgreSQL: every transaction that makes jobs claimable NOTIFYs their queues; each worker
process LISTENs on one dedicated connection, which one of its threads at a time watches.

SQLite has no notifications between processes. A push in this process rings a ``Bell``
(after its commit); jobs pushed by other processes are found by a read (which never waits for
the write lock) repeated at intervals that grow from 5 ms to 200 ms while nothing comes.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg
from psycopg.rows import TupleRow
from sqlalchemy import Connection, Engine, TextClause
from sqlalchemy.exc import OperationalError

from asynctask.brokers.sql.predicates import CHANNEL

logger = logging.getLogger("asynctask.fetch")

#: SQLite poll intervals, seconds: the first, and the longest it grows to.
FIRST_POLL = 0.005
LONGEST_POLL = 0.2
#: Seconds between drains of a busy worker's pending notifications.
DRAIN_INTERVAL = 1.0


class Bell:
    """A wake-up within one process: a ring counter and the threads waiting for it to move."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self.rings = 0

    def ring(self) -> None:
        with self._condition:
            self.rings += 1
            self._condition.notify_all()

    def wait(self, seen: int, timeout: float) -> bool:
        """Wait until the counter moves past ``seen`` (read before checking for work, so a
        ring in between is not missed); False on timeout."""
        with self._condition:
            return self._condition.wait_for(lambda: self.rings != seen, timeout)


class Wake(ABC):
    """Watched by one thread of a fetcher at a time."""

    @abstractmethod
    def arm(self) -> None:
        """Start hearing of new jobs (before a claim: what comes after it is not missed)."""

    @abstractmethod
    def wait(self, timeout: float) -> bool:
        """Block until jobs may be claimable in the fetcher's queues (True) or ``timeout``
        seconds passed (False)."""

    @abstractmethod
    def drain(self) -> None:
        """Discard stale wake-ups, if nobody is watching (called after claims)."""

    @abstractmethod
    def interrupt(self) -> None:
        """Make the watching thread's ``wait`` return False now (the process is going quiet)."""

    @abstractmethod
    def close(self) -> None: ...


class SqlitePoll(Wake):
    """Reads ``check`` (a row if one of ``queues`` has work) on a connection from ``read``, and
    waits between reads on the ``bell`` of the file's pushes in this process."""

    def __init__(
        self,
        bell: Bell,
        read: Callable[[], AbstractContextManager[Connection]],
        check: TextClause,
        queues: Sequence[str],
    ) -> None:
        self._bell = bell
        self._read = read
        self._check = check
        self._params = {f"q{i}": name for i, name in enumerate(queues)}
        #: Kept between waits: a worker idle for long checks five times a second, not faster.
        self._interval = FIRST_POLL
        self._interrupted = False

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            seen = self._bell.rings
            with self._read() as connection:
                if connection.execute(self._check, self._params).first() is not None:
                    self._interval = FIRST_POLL
                    return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._interrupted:
                return False
            self._bell.wait(seen, min(self._interval, remaining))
            self._interval = min(self._interval * 2, LONGEST_POLL)

    def arm(self) -> None:
        """Nothing to start: a poll reads the table as it is."""

    def interrupt(self) -> None:
        self._interrupted = True
        # The other fetchers of this file in this process wake too, find nothing and wait on.
        self._bell.ring()

    def drain(self) -> None:
        """Nothing accumulates: a poll reads the table as it is."""

    def close(self) -> None:
        """Nothing to release: polls use the broker's pool."""


class PgListener(Wake):
    """LISTEN on a connection of its own (a pooled one would carry the LISTEN to other users)."""

    def __init__(self, engine: Engine, queues: Sequence[str]) -> None:
        self._engine = engine
        self._queues = frozenset(queues)
        self._lock = threading.Lock()
        self._connection: psycopg.Connection[TupleRow] | None = None
        self._drained = time.monotonic()
        #: Set by ``close``: a thread still fetching after it must not open a connection that
        #: nobody would close.
        self._closed = False
        self._interrupted = False

    def arm(self) -> None:
        """LISTEN from the first claim on: a notification sent between a claim that found
        nothing and the wait after it is kept by the server for this connection."""
        if self._connection is None and not self._closed:
            with self._lock, self._errors():
                if not self._closed:
                    self._connect()

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock, self._errors():
            if self._closed:
                # Closed: hear nothing, as a poll that finds nothing would.
                time.sleep(timeout)
                return False
            connection = self._connect()
            while True:
                heard = relevant = False
                remaining = max(0.0, deadline - time.monotonic())
                for note in connection.notifies(timeout=remaining, stop_after=1):
                    heard = True
                    relevant = relevant or note.payload in self._queues
                if relevant:
                    # One claim answers every notification pending: drop them, or each
                    # would wake this watcher again for jobs already taken.
                    self._discard_pending(connection)
                    return True
                if not heard or time.monotonic() >= deadline or self._interrupted:
                    return False

    def interrupt(self) -> None:
        """Wake the watcher with a notification no queue answers to (queue names are never
        empty); other workers' watchers hear it too, and wait on."""
        self._interrupted = True
        if self._connection is None:
            return
        args, kwargs = self._connect_args()
        try:
            with psycopg.connect(*args, **kwargs, autocommit=True) as connection:
                connection.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
        except psycopg.Error as exc:
            logger.warning("could not wake the thread waiting for jobs (it stops at its timeout): %s", exc)

    def drain(self) -> None:
        """A busy worker seldom waits, so notifications pile up on its connection (and hold
        the server's notification queue back): read them off now and then.

        Never raises: it runs after a claim has committed, and an error here would lose the
        claim's jobs to the thread (until the claim check gives them back). A broken
        connection is dropped; the next claim or wait opens another."""
        if self._connection is None or time.monotonic() - self._drained < DRAIN_INTERVAL:
            return
        if not self._lock.acquire(blocking=False):
            return
        try:
            with self._errors():
                self._discard_pending(self._connection)
        except OperationalError as exc:
            logger.warning("the connection listening for new jobs broke (another is opened): %s", exc.orig)
        finally:
            self._lock.release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    def _connect(self) -> psycopg.Connection[TupleRow]:
        if self._connection is None:
            args, kwargs = self._connect_args()
            connection: psycopg.Connection[TupleRow] = psycopg.connect(*args, **kwargs, autocommit=True)
            try:
                connection.execute(f"LISTEN {CHANNEL}")
            except BaseException:
                connection.close()
                raise
            self._connection = connection
        return self._connection

    def _connect_args(self) -> tuple[Sequence[str], MutableMapping[str, Any]]:
        """The engine's own connection arguments: the same server, user and search_path."""
        args, kwargs = self._engine.dialect.create_connect_args(self._engine.url)
        return args, kwargs

    def _discard_pending(self, connection: psycopg.Connection[TupleRow]) -> None:
        for _ in connection.notifies(timeout=0):
            pass
        self._drained = time.monotonic()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """psycopg's errors on this connection, raised as SQLAlchemy's (which workers treat as
        broker outages: logged, retried); the broken connection is dropped, and the next wait
        opens a new one."""
        try:
            yield
        except psycopg.Error as exc:
            broken, self._connection = self._connection, None
            if broken is not None:
                broken.close()
            raise OperationalError(f"LISTEN {CHANNEL}", None, exc) from exc
