"""Databases of the sql section: fresh SQLite files, one private PostgreSQL database per system.

The bench touches no data it did not create: on PostgreSQL each system gets a database
``bench_sql_<system>_<random>`` (created from a connection to ``--pg-url``), whose tables
are emptied before every run and which is dropped at the end. Queries here are the
bench's own (counts after a run, the server's version), never made while a worker runs.
"""

from __future__ import annotations

import re
import secrets
import sqlite3
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url


def slug(name: str) -> str:
    """``name`` fit for a database or file name: lower case, runs of other characters as ``_``."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def libpq_url(url: str) -> str:
    """``url`` as libpq takes it (a SQLAlchemy ``postgresql+psycopg://`` driver suffix dropped)."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


class PostgresDatabase:
    """``with PostgresDatabase(admin_url, "huey") as db:`` a private database, dropped on exit."""

    def __init__(self, admin_url: str, label: str) -> None:
        self.admin_url = libpq_url(admin_url)
        self.name = f"bench_sql_{slug(label)}_{secrets.token_hex(4)}"
        self.url = make_url(self.admin_url).set(database=self.name).render_as_string(hide_password=False)

    def __enter__(self) -> PostgresDatabase:
        # CREATE/DROP DATABASE cannot run inside a transaction block: autocommit.
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as connection:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        return self

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as connection:
            # DROP waits until every backend of the server, ours or not, has acknowledged it; one
            # that never does (seen: a client stuck in COPY) must not hang the bench for good.
            connection.execute("SET statement_timeout = '60s'")
            try:
                # FORCE ends sessions a killed worker may have left (PostgreSQL 13+).
                connection.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
                )
            except psycopg.errors.QueryCanceled as error:
                raise RuntimeError(
                    f"could not drop database {self.name} (drop it by hand): {error}"
                ) from error

    def empty(self) -> None:
        """TRUNCATE every table but Alembic's; the database is ours, so every table is the system's."""
        with psycopg.connect(self.url, autocommit=True) as connection:
            tables = connection.execute(
                "SELECT tablename FROM pg_tables "
                "WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            ).fetchall()
            if tables:
                names = sql.SQL(", ").join(sql.Identifier(name) for (name,) in tables)
                connection.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY").format(names))

    def backends(self) -> list[psutil.Process]:
        """The server processes serving this database (their titles name it), for their CPU time."""
        found = []
        for proc in psutil.process_iter(["name", "cmdline"]):
            cmdline = proc.info["cmdline"] or []
            if proc.info["name"] == "postgres" and any(f" {self.name} " in f" {part} " for part in cmdline):
                found.append(proc)
        return found


def query(url: str, statement: str) -> list[tuple[Any, ...]]:
    """Rows of ``statement`` on a SQLite (``sqlite:///path``) or PostgreSQL database."""
    if url.startswith("sqlite:///"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            return connection.execute(statement).fetchall()
        finally:
            connection.close()
    with psycopg.connect(url) as pg:
        return pg.execute(statement).fetchall()


def sqlite_checkpoint(path: Path) -> None:
    """Move everything from ``path``'s write-ahead log into the file itself, so that a copy of
    the file alone holds it all (a process that set the file up may have exited mid-WAL)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()


def postgres_version(admin_url: str) -> str:
    with psycopg.connect(libpq_url(admin_url), connect_timeout=5) as connection:
        row = connection.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "unknown"


def postgres_durability(admin_url: str) -> str:
    """The server settings that decide what a commit costs (the same for every system)."""
    names = ("fsync", "synchronous_commit", "wal_sync_method", "full_page_writes")
    with psycopg.connect(libpq_url(admin_url), connect_timeout=5) as connection:
        rows = connection.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s) ORDER BY name", [list(names)]
        ).fetchall()
    return ", ".join(f"{name} {setting}" for name, setting in rows)


def sqlite_version() -> str:
    return sqlite3.sqlite_version
