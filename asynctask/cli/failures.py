"""What a command says when it fails: one line (what, where, what to do) and an exit status.

The traceback is for ``-v``: a person at a shell needs the line that helps, not 50 lines above it.
"""

from __future__ import annotations

import sys

from asynctask.modules import RequireError

#: Exit status of a command line, setting, module or database to fix before trying again (as
#: argparse's usage errors).
CONFIG = 2
#: Exit status of any other failure.
FAILED = 1


class CommandError(Exception):
    """A failure the command explains in one line."""

    def __init__(self, message: str, status: int = CONFIG) -> None:
        super().__init__(message)
        self.status = status


def one_line(text: object) -> str:
    """``text`` with its line breaks and runs of spaces as single spaces (driver messages span
    lines: psycopg adds hints on tab-indented lines)."""
    return " ".join(str(text).split())


def explain(exc: Exception) -> CommandError:
    """The one line for ``exc``."""
    if isinstance(exc, CommandError):
        return exc
    if isinstance(exc, RequireError | ValueError | TypeError):
        return CommandError(one_line(exc))
    found = _redis_failure(exc) or _database_failure(exc)
    if found is not None:
        return found
    return CommandError(
        f"unexpected error: {type(exc).__name__}: {one_line(exc)} (run with -v for the traceback)", FAILED
    )


def _redis_failure(exc: Exception) -> CommandError | None:
    import redis

    if isinstance(exc, redis.AuthenticationError):
        return CommandError(
            f"Redis refused the credentials: {one_line(exc)}; check the user and password in its URL"
        )
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return CommandError(
            f"cannot reach Redis: {one_line(exc)}; is it running? "
            "(the URL comes from --redis, --broker or ASYNCTASK_REDIS_URL)"
        )
    if isinstance(exc, redis.RedisError):
        return CommandError(f"Redis answered with an error: {one_line(exc)}", FAILED)
    return None


def _database_failure(exc: Exception) -> CommandError | None:
    # Only if SQLAlchemy is loaded: otherwise nothing raised can be one of its errors, and a
    # command that never used it does not load it for this.
    sqlalchemy_exc = sys.modules.get("sqlalchemy.exc")
    if sqlalchemy_exc is None:
        return None
    from asynctask.brokers.sql.transactions import MissingTables

    if isinstance(exc, MissingTables):
        return CommandError(str(exc))
    if isinstance(exc, sqlalchemy_exc.DBAPIError):
        return CommandError(f"database error: {one_line(exc.orig)}")
    if isinstance(exc, sqlalchemy_exc.SQLAlchemyError):
        return CommandError(f"database error: {one_line(exc)}")
    return None
