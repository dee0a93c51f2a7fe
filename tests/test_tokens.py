"""Bearer tokens of the HTTP API (``asynctask.tokens`` and ``asynctask tokens``), on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, inspect, select

from asynctask import tokens
from asynctask.db import migrate
from asynctask.db.engine import create_database_engine
from asynctask.tracking.models import ApiToken
from tests.processes import run_module


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """The migrated database (so the tests also cover 0002). Depends on database_url, so it is
    disposed before the test schema is dropped."""
    migrate.upgrade(database_url)
    created = create_database_engine(database_url)
    yield created
    created.dispose()


def asynctask_tokens(*argv: str, database_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_module("asynctask", *argv, cwd=cwd, env={**os.environ, "ASYNCTASK_DATABASE_URL": database_url})


def tenant_for(bind: Engine | Connection, token: str) -> str | None:
    caller = tokens.caller_for(bind, token)
    assert caller is None or not caller.operator
    return None if caller is None else caller.tenant


def test_a_created_token_authenticates_as_its_tenant(engine: Engine) -> None:
    created = tokens.create_token(engine, "acme", label="ci")
    assert (created.tenant, created.label) == ("acme", "ci")
    assert created.token.startswith("atk_")
    # token_urlsafe(32): 256 bits in 43 characters.
    assert len(created.token) == len("atk_") + 43
    assert tenant_for(engine, created.token) == "acme"
    with engine.connect() as connection:
        assert tenant_for(connection, created.token) == "acme"
    other = tokens.create_token(engine, "globex")
    assert other.token != created.token and other.id != created.id
    assert tenant_for(engine, other.token) == "globex"


def test_an_operator_token_says_so_and_a_tenant_token_does_not(engine: Engine) -> None:
    operator = tokens.create_token(engine, "ops", label="on call", operator=True)
    plain = tokens.create_token(engine, "ops")
    assert operator.operator and not plain.operator
    assert tokens.caller_for(engine, operator.token) == tokens.Caller("ops", operator=True)
    assert tokens.caller_for(engine, plain.token) == tokens.Caller("ops", operator=False)
    listed = {info.id: info.operator for info in tokens.list_tokens(engine)}
    assert listed == {operator.id: True, plain.id: False}
    tokens.revoke_token(engine, operator.id)
    assert tokens.caller_for(engine, operator.token) is None


def test_a_wrong_or_altered_token_authenticates_no_one(engine: Engine) -> None:
    token = tokens.create_token(engine, "acme").token
    last = token[-1]
    altered = token[:-1] + ("A" if last != "A" else "B")
    for presented in [
        altered,
        "X" + token[1:],
        token[:-1],
        token + "A",
        token.removeprefix("atk_"),
        "atk_" + "A" * 43,
        "",
        token[:-1] + "é",
        token[:-1] + "\ud800",
    ]:
        assert tenant_for(engine, presented) is None, presented


def test_a_revoked_token_authenticates_no_one(engine: Engine) -> None:
    revoked = tokens.create_token(engine, "acme")
    kept = tokens.create_token(engine, "acme")
    assert tokens.revoke_token(engine, revoked.id) is True
    assert tenant_for(engine, revoked.token) is None
    assert tenant_for(engine, kept.token) == "acme"
    [first] = [info.revoked_at for info in tokens.list_tokens(engine) if info.id == revoked.id]
    assert first is not None
    # Revoking again is no error and keeps the time of the first revocation.
    assert tokens.revoke_token(engine, revoked.id) is True
    assert [info.revoked_at for info in tokens.list_tokens(engine) if info.id == revoked.id] == [first]
    assert tokens.revoke_token(engine, "nosuchid") is False


def test_the_table_holds_a_hash_of_the_token_never_the_token(engine: Engine) -> None:
    created = tokens.create_token(engine, "acme", label="ci")
    secret = created.token.removeprefix("atk_")
    with engine.connect() as connection:
        [row] = connection.exec_driver_sql("SELECT * FROM asynctask_api_token").mappings().all()
    assert row["id"] == created.id
    assert row["token_hash"] == hashlib.sha256(created.token.encode()).hexdigest()
    for value in row.values():
        assert secret not in str(value)


def test_list_shows_every_token_oldest_first_and_filters_by_tenant(engine: Engine) -> None:
    assert tokens.list_tokens(engine) == []
    first = tokens.create_token(engine, "acme", label="ci")
    second = tokens.create_token(engine, "globex")
    third = tokens.create_token(engine, "acme")
    tokens.revoke_token(engine, third.id)
    listed = tokens.list_tokens(engine)
    # Equal creation times (a coarse clock) are ordered by id, so compare as sets within a tie.
    assert {info.id for info in listed} == {first.id, second.id, third.id}
    assert [info.created_at for info in listed] == sorted(info.created_at for info in listed)
    by_id = {info.id: info for info in listed}
    assert (by_id[first.id].tenant, by_id[first.id].label, by_id[first.id].revoked_at) == ("acme", "ci", None)
    assert by_id[second.id].label is None
    assert by_id[third.id].revoked_at is not None
    assert all(info.created_at.utcoffset() is not None for info in listed)
    assert {info.id for info in tokens.list_tokens(engine, "acme")} == {first.id, third.id}
    assert tokens.list_tokens(engine, "initech") == []
    assert {field.name for field in dataclasses.fields(tokens.TokenInfo)} == {
        "id",
        "tenant",
        "label",
        "created_at",
        "revoked_at",
        "operator",
    }


@pytest.mark.parametrize(
    ("tenant", "label", "message"),
    [
        ("", None, "tenant must not be empty"),
        ("a" * 201, None, "tenant must be at most 200 characters"),
        ("ac\nme", None, "tenant must not contain control characters"),
        ("acme\x00", None, "tenant must not contain control characters"),
        ("acme", "", "label must not be empty"),
        ("acme", "x" * 201, "label must be at most 200 characters"),
        ("acme", "a\tb", "label must not contain control characters"),
    ],
)
def test_bad_tenants_and_labels_are_rejected(
    engine: Engine, tenant: str, label: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        tokens.create_token(engine, tenant, label)
    assert tokens.list_tokens(engine) == []


def test_the_longest_tenant_and_label_fit(engine: Engine) -> None:
    created = tokens.create_token(engine, "ü" * 200, label="l" * 200)
    assert tenant_for(engine, created.token) == "ü" * 200


def test_downgrade_to_0001_drops_the_token_table_only(database_url: str, engine: Engine) -> None:
    tokens.create_token(engine, "acme")
    migrate.downgrade(database_url, "0001")
    names = set(inspect(engine).get_table_names())
    assert ApiToken.__tablename__ not in names
    assert {"asynctask_task", "asynctask_event", "asynctask_event_message"} <= names
    migrate.upgrade(database_url)
    with engine.connect() as connection:
        assert connection.execute(select(ApiToken.id)).all() == []


def test_cli_creates_lists_and_revokes_tokens(database_url: str, tmp_path: Path) -> None:
    upgraded = asynctask_tokens("db", "upgrade", database_url=database_url, cwd=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr

    created = asynctask_tokens(
        "tokens", "create", "--tenant", "acme", "--label", "ci bot", database_url=database_url, cwd=tmp_path
    )
    assert created.returncode == 0, created.stderr
    [token] = created.stdout.splitlines()
    assert token.startswith("atk_")
    assert "for tenant acme; store it now, it is not shown again" in created.stderr
    assert token not in created.stderr
    engine = create_database_engine(database_url)
    try:
        assert tenant_for(engine, token) == "acme"
        [info] = tokens.list_tokens(engine)
        assert f"token id {info.id} " in created.stderr

        listed = asynctask_tokens("tokens", "list", database_url=database_url, cwd=tmp_path)
        assert (listed.returncode, listed.stderr) == (0, "")
        header, row = listed.stdout.splitlines()
        assert header.split() == ["ID", "TENANT", "OPERATOR", "LABEL", "CREATED", "REVOKED"]
        assert row.split() == [
            info.id,
            "acme",
            "no",
            "ci",
            "bot",
            info.created_at.isoformat(timespec="seconds"),
            "-",
        ]
        assert token.removeprefix("atk_") not in listed.stdout
        other = asynctask_tokens(
            "tokens", "list", "--tenant", "globex", database_url=database_url, cwd=tmp_path
        )
        assert [line.split() for line in other.stdout.splitlines()] == [header.split()]

        revoked = asynctask_tokens("tokens", "revoke", info.id, database_url=database_url, cwd=tmp_path)
        assert (revoked.returncode, revoked.stderr) == (0, "")
        assert tenant_for(engine, token) is None
        [row] = asynctask_tokens(
            "tokens", "list", database_url=database_url, cwd=tmp_path
        ).stdout.splitlines()[1:]
        assert row.split()[-1] != "-"
    finally:
        engine.dispose()

    unknown = asynctask_tokens("tokens", "revoke", "nosuchid", database_url=database_url, cwd=tmp_path)
    assert unknown.returncode == 1
    assert unknown.stdout == ""
    assert unknown.stderr.strip() == "asynctask: no token with id nosuchid (see asynctask tokens list)"


def test_cli_creates_an_operator_token(database_url: str, tmp_path: Path) -> None:
    migrate.upgrade(database_url)
    created = asynctask_tokens(
        "tokens", "create", "--tenant", "ops", "--operator", database_url=database_url, cwd=tmp_path
    )
    assert created.returncode == 0, created.stderr
    assert "for an operator of tenant ops; store it now" in created.stderr
    engine = create_database_engine(database_url)
    try:
        assert tokens.caller_for(engine, created.stdout.strip()) == tokens.Caller("ops", operator=True)
    finally:
        engine.dispose()
    listed = asynctask_tokens("tokens", "list", database_url=database_url, cwd=tmp_path)
    assert listed.stdout.splitlines()[1].split()[1:3] == ["ops", "yes"]


def test_cli_creates_the_deployment_s_token(database_url: str, tmp_path: Path) -> None:
    migrate.upgrade(database_url)
    created = asynctask_tokens("tokens", "create", "--operator", database_url=database_url, cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert "for the deployment (an operator of every tenant); store it now" in created.stderr
    engine = create_database_engine(database_url)
    try:
        assert tokens.caller_for(engine, created.stdout.strip()) == tokens.Caller(None, operator=True)
    finally:
        engine.dispose()
    listed = asynctask_tokens("tokens", "list", database_url=database_url, cwd=tmp_path)
    assert listed.stdout.splitlines()[1].split()[1:3] == ["-", "yes"]
    tenantless = asynctask_tokens("tokens", "create", database_url=database_url, cwd=tmp_path)
    assert (tenantless.returncode, tenantless.stdout) == (2, "")
    assert tenantless.stderr.strip() == (
        "asynctask: tokens create needs --tenant NAME, or --operator for the deployment's token"
    )


def test_cli_rejects_a_bad_tenant(database_url: str, tmp_path: Path) -> None:
    migrate.upgrade(database_url)
    result = asynctask_tokens("tokens", "create", "--tenant", "", database_url=database_url, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip() == "asynctask: tenant must not be empty"


@pytest.mark.parametrize("argv", [["create", "--tenant", "acme"], ["revoke", "abc"], ["list"]])
def test_cli_asks_for_db_upgrade_when_the_table_is_missing(
    argv: list[str], database_url: str, tmp_path: Path
) -> None:
    result = asynctask_tokens("tokens", *argv, database_url=database_url, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    assert line.startswith("asynctask: database ")
    # A SQLite file that does not exist is not created: the line says so.
    assert "run `asynctask db upgrade" in line
