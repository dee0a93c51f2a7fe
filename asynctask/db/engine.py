"""Engines for the tracking database, from ``ASYNCTASK_DATABASE_URL``.

``postgresql://`` URLs use psycopg 3. SQLite files run in WAL mode (readers never wait for
the writer) with a busy timeout; writers begin with ``BEGIN IMMEDIATE`` so that two processes
writing one file queue up for the lock instead of failing halfway through a transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, Connection, make_url

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

#: Seconds a SQLite writer waits for another process's write lock before giving up.
SQLITE_BUSY_TIMEOUT = 30.0


def normalize_url(url: str | URL) -> URL:
    """``postgresql://`` and ``postgres://`` mean psycopg 3, the driver AsyncTask ships with."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def create_database_engine(url: str | URL, **kwargs: Any) -> Engine:
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        kwargs.setdefault("connect_args", {})
        kwargs["connect_args"].setdefault("timeout", SQLITE_BUSY_TIMEOUT)
        # Threads of one process share the engine; each takes its own pooled connection.
        kwargs["connect_args"].setdefault("check_same_thread", False)
        engine = create_engine(parsed, **kwargs)
        _configure_sqlite(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, **kwargs)


def create_async_database_engine(url: str | URL, **kwargs: Any) -> AsyncEngine:
    """``create_database_engine``'s asyncio twin (SQLAlchemy's asyncio extension): psycopg's
    async mode for PostgreSQL, aiosqlite for SQLite, configured the same way."""
    # Only asyncio clients load the extension (and greenlet, which it runs on).
    from sqlalchemy.ext.asyncio import create_async_engine

    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        kwargs.setdefault("connect_args", {})
        kwargs["connect_args"].setdefault("timeout", SQLITE_BUSY_TIMEOUT)
        engine = create_async_engine(parsed.set(drivername="sqlite+aiosqlite"), **kwargs)
        _configure_sqlite(engine.sync_engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(parsed, **kwargs)


def writer(engine: Engine) -> Engine:
    """The same engine, but its transactions take SQLite's write lock when they begin."""
    return engine.execution_options(asynctask_immediate=True)


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite's own transaction handling would issue BEGIN lazily (after our reads); we
        # emit BEGIN ourselves in "begin" below.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        options = connection.get_execution_options()
        # An AUTOCOMMIT connection (the API's reads) runs each statement on its own.
        if options.get("isolation_level") == "AUTOCOMMIT":
            return
        immediate = options.get("asynctask_immediate", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def autocommit(engine: Engine) -> Engine:
    """The same engine (and pool) for reads that need no transaction: no BEGIN and ROLLBACK
    round trips around them."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def as_utc(value: datetime | None) -> datetime | None:
    """Every stored time is UTC; SQLite hands them back naive, PostgreSQL in the session's zone."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
