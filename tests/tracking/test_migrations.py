"""Migrations of the tracking and SQL broker tables build exactly the models' schema, on SQLite
and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import tomllib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Engine, Integer, MetaData, delete, func, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

# Imported for its tables: the SQL broker's share Base.metadata with the tracking tables.
import asynctask.brokers.sql.models  # noqa: F401
from asynctask import tokens
from asynctask.db import migrate
from asynctask.db.base import NAMING, Base
from asynctask.db.engine import create_database_engine
from asynctask.tracking.models import Event, EventMessage, Task
from tests.conftest import POSTGRES_URL
from tests.processes import run_module

ROOT = Path(__file__).resolve().parents[2]
TABLES = set(Base.metadata.tables)
HEAD = "0023"


@pytest.fixture
def bare_engine(database_url: str) -> Iterator[Engine]:
    """An engine on the still empty database (tests/tracking_fixtures.py's ``database_engine``
    creates the tables). Depends on database_url, so it is disposed before the test schema is dropped."""
    engine = create_database_engine(database_url)
    yield engine
    engine.dispose()


def tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def drift(engine: Engine, metadata: MetaData = Base.metadata) -> list[Any]:
    with engine.connect() as connection:
        diffs: list[Any] = compare_metadata(MigrationContext.configure(connection), metadata)
    return diffs


def asynctask_db(*argv: str, cwd: Path, env_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ASYNCTASK_DATABASE_URL"}
    if env_url is not None:
        env["ASYNCTASK_DATABASE_URL"] = env_url
    return run_module("asynctask", "db", *argv, cwd=cwd, env=env)


def alembic(*argv: str, database_url: str) -> subprocess.CompletedProcess[str]:
    return run_module("alembic", *argv, cwd=ROOT, env={**os.environ, "ASYNCTASK_DATABASE_URL": database_url})


def test_upgrade_creates_the_tables_exactly_as_the_models_define_them(
    database_url: str, bare_engine: Engine
) -> None:
    assert migrate.current(database_url) is None
    migrate.upgrade(database_url)
    assert migrate.current(database_url) == migrate.head() == HEAD
    assert tables(bare_engine) == TABLES
    assert drift(bare_engine) == []
    # The same comparison through env.py's configuration, as `alembic check` makes it.
    command.check(migrate.alembic_config(database_url))


def test_the_drift_check_catches_a_model_change_without_a_migration(
    database_url: str, bare_engine: Engine
) -> None:
    migrate.upgrade(database_url)
    changed = MetaData(naming_convention=NAMING)
    for table in Base.metadata.tables.values():
        table.to_metadata(changed)
    changed.tables["asynctask_task"].append_column(Column("priority", Integer))
    assert [(diff[0], diff[2], diff[3].name) for diff in drift(bare_engine, changed)] == [
        ("add_column", "asynctask_task", "priority")
    ]


def test_tokens_made_before_operator_tokens_stay_tenant_tokens(
    database_url: str, bare_engine: Engine
) -> None:
    migrate.upgrade(database_url, "0009")
    token = tokens.TOKEN_PREFIX + "x" * 43
    with bare_engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO asynctask_api_token (id, tenant, token_hash, created_at) "
                "VALUES ('t1', 'acme', :hash, :at)"
            ),
            {"hash": tokens.hash_token(token), "at": datetime.now(UTC)},
        )
    migrate.upgrade(database_url)
    assert tokens.caller_for(bare_engine, token) == tokens.Caller("acme", operator=False)
    migrate.downgrade(database_url, "0009")
    assert "operator" not in {c["name"] for c in inspect(bare_engine).get_columns("asynctask_api_token")}
    with bare_engine.connect() as connection:
        assert connection.execute(text("SELECT tenant FROM asynctask_api_token")).scalars().all() == ["acme"]


def test_a_downgrade_before_deployment_tokens_drops_them_and_keeps_the_tenants_tokens(
    database_url: str, bare_engine: Engine
) -> None:
    migrate.upgrade(database_url)
    with pytest.raises(IntegrityError), bare_engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO asynctask_api_token (id, tenant, token_hash, created_at, operator) "
                "VALUES ('t1', NULL, 'h', :at, false)"
            ),
            {"at": datetime.now(UTC)},
        )
    deployment = tokens.create_token(bare_engine, None, operator=True)
    tenant = tokens.create_token(bare_engine, "acme", operator=True)
    migrate.downgrade(database_url, "0018")
    assert tokens.caller_for(bare_engine, deployment.token) is None
    assert tokens.caller_for(bare_engine, tenant.token) == tokens.Caller("acme", operator=True)
    [tenant_column] = [
        c for c in inspect(bare_engine).get_columns("asynctask_api_token") if c["name"] == "tenant"
    ]
    assert tenant_column["nullable"] is False
    migrate.upgrade(database_url)
    assert drift(bare_engine) == []


def test_downgrade_to_base_and_upgrade_again(database_url: str, bare_engine: Engine) -> None:
    migrate.upgrade(database_url)
    migrate.downgrade(database_url, "base")
    assert tables(bare_engine) == set()
    assert migrate.current(database_url) is None
    migrate.upgrade(database_url)
    assert tables(bare_engine) == TABLES
    assert migrate.current(database_url) == HEAD
    assert drift(bare_engine) == []


def test_the_migrated_schema_takes_rows_and_cascades_deletes(database_url: str, bare_engine: Engine) -> None:
    migrate.upgrade(database_url)
    now = datetime.now(UTC)
    with Session(bare_engine) as session, session.begin():
        session.add(
            Task(
                id="t1",
                job_name="J",
                queue="default",
                meta={"k": 1},
                state="running",
                total=1,
                chunk_size=1,
                created_at=now,
            )
        )
        # No relationship() tells the ORM the insert order, so each parent is flushed first.
        session.flush()
        event = Event(job_id="jid-1", task_id="t1", status="enqueue", params=[1, "ü"])
        session.add(event)
        session.flush()
        session.add(EventMessage(event_id=event.id, seq=1, at=now, status="enqueue", text="queued"))
    with bare_engine.begin() as connection:
        connection.execute(delete(Task))
    with bare_engine.connect() as connection:
        assert connection.scalar(select(func.count()).select_from(Event)) == 0
        assert connection.scalar(select(func.count()).select_from(EventMessage)) == 0


def test_cli_upgrades_downgrades_and_reports_the_revision(database_url: str, tmp_path: Path) -> None:
    upgraded = asynctask_db("upgrade", "--database-url", database_url, cwd=tmp_path)
    assert (upgraded.returncode, upgraded.stderr) == (0, "")
    assert upgraded.stdout.strip().endswith(f"to revision {HEAD} (head)")
    # Without --database-url it migrates the database the worker uses: ASYNCTASK_DATABASE_URL.
    current = asynctask_db("current", cwd=tmp_path, env_url=database_url)
    assert (current.returncode, current.stderr) == (0, "")
    assert current.stdout.strip().endswith(f"is at revision {HEAD} (head)")
    downgraded = asynctask_db("downgrade", "base", "--database-url", database_url, cwd=tmp_path)
    assert (downgraded.returncode, downgraded.stderr) == (0, "")
    assert "to base" in downgraded.stdout
    assert migrate.current(database_url) is None


def test_cli_reports_an_unreachable_database_in_one_line(database_url: str, tmp_path: Path) -> None:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        unreachable, reason = url.set(database=str(tmp_path / "missing" / "x.db")), "unable to open database"
    else:
        unreachable, reason = url.set(port=1), "Connection refused"
    result = asynctask_db(
        "upgrade", "--database-url", unreachable.render_as_string(hide_password=False), cwd=tmp_path
    )
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("asynctask: database ")
    assert reason in line


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "--database-url is not a database URL"),
        ("nosuchdb://host/db", "it must start with sqlite:// or postgresql:// (it starts with nosuchdb://)"),
    ],
)
def test_cli_rejects_a_bad_database_url(url: str, message: str, tmp_path: Path) -> None:
    result = asynctask_db("current", "--database-url", url, cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("asynctask: ")
    assert message in line


def test_alembic_upgrade_head_in_the_repository_root(database_url: str, bare_engine: Engine) -> None:
    result = alembic("upgrade", "head", database_url=database_url)
    assert (result.returncode, result.stderr) == (0, "")
    assert tables(bare_engine) == TABLES
    assert migrate.current(database_url) == HEAD
    assert drift(bare_engine) == []


def test_alembic_writes_the_sql_offline_without_touching_the_database(
    database_url: str, bare_engine: Engine
) -> None:
    result = alembic("upgrade", "head", "--sql", database_url=database_url)
    assert result.returncode == 0, result.stderr
    assert "CREATE TABLE asynctask_event_message" in result.stdout
    assert tables(bare_engine) == set()


def test_autogenerate_compares_the_urls_schema_only(database_url: str) -> None:
    if make_url(database_url).get_backend_name() != "postgresql":
        pytest.skip("schemas are PostgreSQL's")
    # A table the models do not define, in a schema outside the URL's search_path: a comparison
    # that looked beyond the URL's schema (at public, say) would want to drop it.
    other = f"attest_{uuid.uuid4().hex[:12]}"
    admin = create_database_engine(POSTGRES_URL)
    with admin.begin() as connection:
        connection.exec_driver_sql(f"CREATE SCHEMA {other}")
        connection.exec_driver_sql(f"CREATE TABLE {other}.not_ours (id integer)")
    try:
        migrate.upgrade(database_url)
        command.check(migrate.alembic_config(database_url))
    finally:
        with admin.begin() as connection:
            connection.exec_driver_sql(f"DROP SCHEMA {other} CASCADE")
        admin.dispose()


def test_the_package_ships_every_subpackage_and_the_migrations() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {
        ".".join(path.relative_to(ROOT).parts)
        for top in ("asynctask", "webapi")
        for path in [ROOT / top, *(ROOT / top).rglob("*")]
        if path.is_dir() and path.name != "__pycache__"
    }
    # A directory left out is still copied as data, with a warning from setuptools at every build.
    assert on_disk <= set(setuptools["packages"])
    for data in (
        "webapi.static",
        "webapi.dashboard.static",
        "webapi.dashboard.templates.asynctask_dashboard",
    ):
        shipped = setuptools["package-data"][data]
        files = ROOT.joinpath(*data.split(".")).iterdir()
        assert all(any(path.match(glob) for glob in shipped) for path in files), data
    assert setuptools["package-dir"] == {"asynctask._migrations": "migrations"}
    assert migrate.script_location().samefile(ROOT / "migrations")
