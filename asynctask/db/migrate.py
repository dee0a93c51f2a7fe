"""Schema migrations of the tracking tables (Alembic), for code and for ``asynctask db``.

The revisions live in the repository's ``migrations/`` directory, which pyproject.toml maps into
the package as ``asynctask._migrations``: one ``importlib.resources`` lookup finds them in an
editable install and in a wheel alike.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from asynctask.db.engine import create_database_engine


def script_location() -> Path:
    location = files("asynctask._migrations")
    if not isinstance(location, Path):
        # Alembic imports env.py and the revisions from files, so a zipped install cannot work.
        raise RuntimeError(f"asynctask._migrations must be installed as files on disk, not as {location}")
    return location


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    # ConfigParser reads "%" as interpolation; URL escapes (options=-csearch_path%3D..., a
    # percent-encoded password) must reach env.py unchanged.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    command.downgrade(alembic_config(database_url), revision)


def current(database_url: str) -> str | None:
    """The revision the database is at; None before the first upgrade (or after a downgrade to base)."""
    engine = create_database_engine(database_url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def head() -> str | None:
    """The latest revision shipped with this version of asynctask."""
    return ScriptDirectory(script_location()).get_current_head()
