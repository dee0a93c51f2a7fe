"""A task on the SQL broker is written in one transaction, its jobs and its readiness with it,
and a tenant's row of turns is locked by that transaction's last statements only: a tenant's
concurrent submissions (an API's requests) wait for each other's commit, not for each other's
events."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Engine, event, select

from asynctask import Registry, job
from asynctask.brokers.sql import SqlBroker
from asynctask.client import Client
from asynctask.tasks import operations as tasks
from asynctask.tracking.models import Task
from tests.brokers.conftest import MakeClient

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgresql"])


@pytest.fixture
def client(make_client: MakeClient, registry: Registry) -> Client:
    @job(registry=registry)
    def load(rows: list[Any]) -> None: ...

    return make_client()


@contextmanager
def statements(engine: Engine) -> Iterator[list[str]]:
    """The statements ``engine`` runs within the block, whitespace collapsed."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(" ".join(statement.split()))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_the_task_commits_ready_with_its_jobs_in_its_one_transaction(client: Client, engine: Engine) -> None:
    broker = client.broker
    assert isinstance(broker, SqlBroker)
    commits: list[str] = []
    checkouts: list[str] = []
    event.listen(engine, "commit", lambda _conn: commits.append("tracking"))
    event.listen(broker.engine, "commit", lambda _conn: commits.append("broker"))
    event.listen(broker.engine.pool, "checkout", lambda *_: checkouts.append("broker"))

    task_id = tasks.create_task(engine, client, "load", range(10), chunk_size=2, tenant="acme")

    assert commits == ["tracking"]
    assert checkouts == []
    with engine.connect() as connection:
        assert connection.scalar(select(Task.state).where(Task.id == task_id)) == "ready"


def test_a_tenant_s_row_of_turns_is_taken_by_the_last_statements_before_the_commit(
    client: Client, engine: Engine
) -> None:
    with statements(engine) as seen:
        tasks.create_task(engine, client, "load", range(10), chunk_size=2, tenant="acme")

    [taken] = [i for i, s in enumerate(seen) if s.startswith("INSERT INTO asynctask_share")]
    counted = max(i for i, s in enumerate(seen) if s.startswith("UPDATE asynctask_task"))
    assert counted < taken
    after = seen[taken + 1 :]
    assert after and all(s.startswith("INSERT INTO asynctask_job") for s in after), after
