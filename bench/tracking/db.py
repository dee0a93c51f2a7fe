"""Throw-away tracking databases: one PostgreSQL database per bench run, fresh SQLite files.

The bench never touches data it did not create: on PostgreSQL it creates its own database
``asynctask_bench_<random>`` (from a connection to ``--pg-url``, default the ``test``
database), empties only that database's tables between runs, and drops it on exit.
Tables come from the models (``Base.metadata.create_all``): the bench measures tracking, not
the migrations.
"""

from __future__ import annotations

import secrets
import sqlite3
from pathlib import Path
from typing import Protocol

from sqlalchemy import Engine, create_engine

# Imported for its tables: they join Base.metadata, which create_all creates.
import asynctask.tracking.models  # noqa: F401
from asynctask.db.base import Base
from asynctask.db.engine import create_database_engine, normalize_url

#: Children first, so that TRUNCATE needs no CASCADE into tables we did not name.
TABLES = (
    "asynctask_task_addition, asynctask_task_callback, asynctask_task_parent, asynctask_failed_item, "
    "asynctask_event_message, asynctask_event, asynctask_task"
)


class Database(Protocol):
    kind: str

    def fresh(self) -> str:
        """The URL of an empty tracking database (tables created)."""
        ...

    def version(self) -> str: ...


def create_tables(url: str) -> None:
    engine = create_database_engine(url)
    try:
        Base.metadata.create_all(engine)
    finally:
        engine.dispose()


class SqliteFiles:
    """Each ``fresh()`` is a new file in ``workdir``: an empty file is the cheapest reset."""

    kind = "sqlite"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._count = 0

    def fresh(self) -> str:
        self._count += 1
        path = self.workdir / f"tracking-{self._count}.db"
        url = f"sqlite:///{path}"
        create_tables(url)
        return url

    def version(self) -> str:
        return sqlite3.sqlite_version


class PostgresDatabase:
    """``with PostgresDatabase(admin_url) as db:`` a private database, dropped on exit."""

    kind = "postgresql"

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.name = f"asynctask_bench_{secrets.token_hex(6)}"
        admin = normalize_url(admin_url)
        self.url = admin.set(database=self.name).render_as_string(hide_password=False)
        self._admin: Engine | None = None
        self._tables = False

    def __enter__(self) -> PostgresDatabase:
        # CREATE/DROP DATABASE cannot run inside a transaction block.
        self._admin = create_engine(
            normalize_url(self.admin_url), isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
        )
        with self._admin.connect() as connection:
            connection.exec_driver_sql(f"CREATE DATABASE {self.name}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._admin is None:
            return
        try:
            with self._admin.connect() as connection:
                # FORCE ends the worker's and the bench's own leftover sessions (PostgreSQL 13+).
                connection.exec_driver_sql(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")
        finally:
            self._admin.dispose()
            self._admin = None

    def fresh(self) -> str:
        """Empty the tables (created on first use); RESTART IDENTITY so event ids start at 1."""
        if not self._tables:
            create_tables(self.url)
            self._tables = True
            return self.url
        engine = create_database_engine(self.url)
        try:
            with engine.begin() as connection:
                connection.exec_driver_sql(f"TRUNCATE {TABLES} RESTART IDENTITY")
        finally:
            engine.dispose()
        return self.url

    def version(self) -> str:
        engine = create_database_engine(self.url)
        try:
            with engine.connect() as connection:
                return str(connection.exec_driver_sql("SHOW server_version").scalar())
        finally:
            engine.dispose()
