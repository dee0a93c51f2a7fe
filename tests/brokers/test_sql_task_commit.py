"""A task on the SQL broker is written in one transaction, its jobs and its readiness with it;
on PostgreSQL a tenant's turns are taken outside it, so that a tenant's concurrent submissions
(an API's requests) do not wait for each other's transactions, and given back if it rolls back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, event, select, text

from asynctask import Registry, job, payload
from asynctask.brokers.sql import SqlBroker
from asynctask.client import Client
from asynctask.tasks import creation as tasks
from asynctask.tasks.options import TaskOptions
from asynctask.tracking.models import Task
from tests.brokers.conftest import MakeClient

pytestmark = pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
ACME = TaskOptions(tenant="acme")


@pytest.fixture
def client(make_client: MakeClient, registry: Registry) -> Client:
    @job(registry=registry)
    def load(rows: list[Any]) -> None: ...

    return make_client()


def test_the_task_commits_ready_with_its_jobs_in_its_one_transaction(
    client: Client, engine: Engine, backend: str
) -> None:
    broker = client.broker
    assert isinstance(broker, SqlBroker)
    commits: list[str] = []
    statements: list[str] = []
    event.listen(engine, "commit", lambda _conn: commits.append("tracking"))
    event.listen(broker.engine, "commit", lambda _conn: commits.append("broker"))
    event.listen(broker.engine, "before_cursor_execute", lambda _c, _k, sql, *_: statements.append(sql))

    task_id = tasks.create_task(engine, client, "load", range(10), TaskOptions(chunk_size=2, tenant="acme"))

    assert commits == ["tracking"]
    # Nothing after the commit; on PostgreSQL, the tenant's turns in a statement of their own.
    taken = [s for s in statements if s.startswith("INSERT INTO asynctask_share")]
    assert statements == taken
    assert len(taken) == (1 if backend == "postgresql" else 0)
    with engine.connect() as connection:
        assert connection.scalar(select(Task.state).where(Task.id == task_id)) == "ready"


def turns_by_task(client: Client) -> dict[str, list[int]]:
    broker = client.broker
    assert isinstance(broker, SqlBroker)
    found: dict[str, list[int]] = {}
    with broker.engine.connect() as connection:
        for turn, encoded in connection.execute(text("SELECT turn, payload FROM asynctask_job ORDER BY id")):
            found.setdefault(payload.loads(encoded)["task"], []).append(turn)
    return found


def test_a_tenant_s_task_is_created_while_another_of_its_tasks_is_being_written(
    client: Client, engine: Engine, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite has one writer at a time")
    monkeypatch.setattr(tasks, "BATCH", 2)
    written, go_on = threading.Event(), threading.Event()

    def slow_items() -> Iterator[int]:
        # Two batches written (their turns taken), then the third waits.
        yield from range(4)
        written.set()
        go_on.wait(10)
        yield from range(4, 6)

    made: list[str] = []
    first = threading.Thread(
        target=lambda: made.append(tasks.create_task(engine, client, "load", slow_items(), ACME))
    )
    first.start()
    try:
        assert written.wait(10)
        started = time.monotonic()
        second = tasks.create_task(engine, client, "load", range(3), ACME)
        took = time.monotonic() - started
    finally:
        go_on.set()
        first.join(30)

    assert took < 5
    assert turns_by_task(client) == {made[0]: [0, 1, 2, 3, 7, 8], second: [4, 5, 6]}


def test_a_rolled_back_task_gives_its_tenant_s_turns_back(
    client: Client, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "BATCH", 2)

    def failing() -> Iterator[int]:
        yield from range(4)
        raise RuntimeError("the upload broke")

    with pytest.raises(RuntimeError):
        tasks.create_task(engine, client, "load", failing(), ACME)
    task_id = tasks.create_task(engine, client, "load", range(3), ACME)

    assert turns_by_task(client) == {task_id: [0, 1, 2]}
