"""A look at the tracking database before a command uses it, so that a command that cannot
work on it says why in one line, and a SQLite file that does not exist is not created empty."""

from __future__ import annotations

import os
from pathlib import Path

from asynctask.cli.failures import CommandError, one_line
from asynctask.settings import DEFAULT_DATABASE_URL, shown_url

#: PostgreSQL's refusals that end by themselves: the server is there but not ready.
_PASSING = (
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "too many clients",
)


class DatabaseUnreachable(CommandError):
    """The database server did not answer (or is not ready). A worker waits for it; a command
    that needs it now stops."""


def shown_database_url(url: str, source: str) -> str:
    """``url`` as it may be shown (password hidden), or a CommandError naming ``source`` (the
    option or variable it came from) if it is no database URL."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        # Not echoed: an unparsable URL may still hold a password.
        raise CommandError(
            f"{source} is not a database URL (like sqlite:///asynctask.db or postgresql://user@host/db)"
        ) from None


def require_database(url: str, *, tables: bool = True) -> None:
    """Raise a CommandError unless the database at ``url`` exists and, with ``tables``, has
    AsyncTask's tables (``DatabaseUnreachable`` when its server does not answer).

    The tables, not Alembic's revision: a schema made with ``Base.metadata.create_all`` (as
    tests and some deployments do) has none, and works."""
    from sqlalchemy import inspect
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
    from sqlalchemy.pool import NullPool

    from asynctask.db.engine import create_database_engine
    from asynctask.tracking.models import Task

    shown = shown_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise CommandError("the database URL is not one (like sqlite:///asynctask.db)") from None
    sqlite = parsed.get_backend_name() == "sqlite"
    path = sqlite_file(url)
    if path is not None and not path.exists():
        raise CommandError(
            f"database file {path.resolve()} does not exist: run `{upgrade_command(url)}` to create it"
        )
    try:
        engine = create_database_engine(parsed, poolclass=NullPool)
    except (ArgumentError, NoSuchModuleError) as exc:
        raise CommandError(f"database {shown}: {one_line(exc)}") from None
    try:
        with engine.connect() as connection:
            missing = tables and not inspect(connection).has_table(Task.__tablename__)
    except DBAPIError as exc:
        message = one_line(exc.orig)
        if not sqlite and ("FATAL:" not in message or any(p in message for p in _PASSING)):
            raise DatabaseUnreachable(f"cannot reach the database at {shown}: {message}") from None
        raise CommandError(f"cannot open the database {shown}: {message}") from None
    finally:
        engine.dispose()
    if missing:
        raise CommandError(
            f"database {shown} has no AsyncTask tables: run `{upgrade_command(url)}` to create them"
        )


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL; None for other databases, in-memory ones and unparsable URLs."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    # A file: URI names the file in its own way, and may mean memory.
    return None if parsed.query.get("uri") else Path(parsed.database)


def upgrade_command(url: str) -> str:
    """The command that migrates ``url``: ``asynctask db upgrade``, with ``--database-url``
    when that is not the database it would migrate by default."""
    if url == (os.environ.get("ASYNCTASK_DATABASE_URL") or DEFAULT_DATABASE_URL):
        return "asynctask db upgrade"
    return f"asynctask db upgrade --database-url {shown_url(url)}"
