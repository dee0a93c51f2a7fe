"""The PostgreSQL server the bench creates its own databases from (``--pg-url``)."""

from __future__ import annotations

import argparse

from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from asynctask.db.engine import normalize_url

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


def postgres_unreachable(admin_url: str) -> str | None:
    """Why PostgreSQL at ``admin_url`` cannot be used, or None if it can."""
    try:
        engine = create_engine(normalize_url(admin_url), connect_args={"connect_timeout": 5})
    except (SQLAlchemyError, ValueError) as exc:
        return f"bad --pg-url: {exc}"
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except SQLAlchemyError as exc:
        return " ".join(str(getattr(exc, "orig", exc)).split())[:300]
    finally:
        engine.dispose()
    return None


def shown(url: str) -> str:
    """A URL fit for the report (password hidden)."""
    return make_url(url).render_as_string(hide_password=True)


def add_pg_url(parser: argparse.ArgumentParser) -> None:
    """The ``--pg-url`` option of a standalone bench that makes its own databases."""
    parser.add_argument(
        "--pg-url", default=DEFAULT_PG_URL, help="an admin URL: the bench makes its own databases"
    )


def require_postgres(admin_url: str) -> None:
    """Exit, saying why, when PostgreSQL at ``admin_url`` cannot be used."""
    unreachable = postgres_unreachable(admin_url)
    if unreachable is not None:
        raise SystemExit(f"PostgreSQL is not reachable at {admin_url}: {unreachable}")
