"""Alembic environment of the tracking tables (``asynctask.tracking.models``) and the SQL
broker's tables (``asynctask.brokers.sql.models``), which share one metadata.

The database is the ``sqlalchemy.url`` our code puts on the Config (``asynctask db``,
``asynctask.db.migrate``), else ``ASYNCTASK_DATABASE_URL`` (default ``sqlite:///asynctask.db``):
so ``alembic upgrade head`` in the repository root migrates the database the worker writes to.
"""

from __future__ import annotations

from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.pool import NullPool

# Imported for their tables: they join Base.metadata, which autogenerate compares.
import asynctask.brokers.sql.models
import asynctask.tracking.models  # noqa: F401
from asynctask.db.base import Base
from asynctask.db.engine import create_database_engine, normalize_url
from asynctask.settings import Settings

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

#: The tables live in the connection's default schema: on PostgreSQL the first of its search_path,
#: which a URL can set (``?options=-csearch_path%3Dname``). Comparing that schema only keeps
#: other schemas' tables, public's included, out of autogenerate.
OPTIONS: dict[str, Any] = {"target_metadata": Base.metadata, "include_schemas": False}


def database_url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings.from_env().database_url


def run_migrations_offline() -> None:
    url = normalize_url(database_url())
    context.configure(
        url=url,
        literal_binds=True,
        render_as_batch=url.get_backend_name() == "sqlite",
        **OPTIONS,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # NullPool: the connection is closed after the migration, so the SQLite foreign-key switch
    # below never reaches a connection the application uses.
    engine = create_database_engine(database_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "sqlite":
                _migrate_sqlite(connection)
            else:
                context.configure(connection=connection, **OPTIONS)
                with context.begin_transaction():
                    context.run_migrations()
    finally:
        engine.dispose()


def _migrate_sqlite(connection: Connection) -> None:
    # Batch mode alters a table by copying it and dropping the original; with foreign keys
    # enforced, that drop would cascade-delete every row referencing the table. So they are off
    # while migrating and checked before the commit instead. The pragma is ignored inside a
    # transaction, hence the DBAPI cursor before SQLAlchemy begins one.
    cursor = connection.connection.cursor()
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()
    # create_database_engine issues a real BEGIN, so SQLite's DDL is transactional here and a
    # failed upgrade rolls back as a whole.
    context.configure(connection=connection, render_as_batch=True, transactional_ddl=True, **OPTIONS)
    with context.begin_transaction():
        context.run_migrations()
        dangling = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
        if dangling:
            raise RuntimeError(f"the migration leaves rows with dangling foreign keys: {dangling[:5]}")


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
