"""Fixtures for tracking and API tests (a pytest plugin of tests/conftest.py): a fresh tracking
database (SQLite file or PostgreSQL schema) with the tables created, a client and workers with
the tracking middleware."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select

# Imported for its tables: they join Base.metadata, which create_all creates.
import asynctask.tracking.models  # noqa: F401
from asynctask import Client, JobDefinition, Registry, Settings, Tracking, job
from asynctask.db.base import Base
from asynctask.db.engine import create_database_engine
from asynctask.middleware import Chain, TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.tracking.models import Event, Task
from asynctask.worker import Worker
from tests.conftest import wait_until


@pytest.fixture
def database_engine(database_url: str) -> Iterator[Engine]:
    created = create_database_engine(database_url)
    Base.metadata.create_all(created)
    yield created
    created.dispose()


@pytest.fixture
def tracked_settings(redis_settings: Settings, database_url: str) -> Settings:
    return Settings(**{**redis_settings.__dict__, "database_url": database_url})


@pytest.fixture
def tracked_client(tracked_settings: Settings, registry: Registry, conn: redis.Redis) -> Client:
    return Client(
        tracked_settings, connection=conn, registry=registry, middleware=Chain([TrackingClientMiddleware()])
    )


@pytest.fixture
def redis_tracking(tracked_client: Client, database_engine: Engine) -> Tracking:
    return Tracking(tracked_client, database_engine)


@pytest.fixture
def start_tracked_worker(
    start_redis_worker: Callable[..., Worker], database_url: str, database_engine: Engine
) -> Callable[..., Worker]:
    def start(**overrides: Any) -> Worker:
        overrides.setdefault("server_middleware", Chain([TrackingServerMiddleware()]))
        return start_redis_worker(database_url=database_url, **overrides)

    return start


@pytest.fixture
def noop_job(registry: Registry) -> JobDefinition[Any]:
    """A job that does nothing, for tasks whose transitions a test writes itself."""

    @job(registry=registry)
    def noop(items: list[Any]) -> None:
        pass

    return noop


def tracked_rows(engine: Engine) -> tuple[int, int]:
    """How many tasks and events the tracking tables hold."""
    with engine.connect() as connection:
        tasks = connection.execute(select(func.count()).select_from(Task)).scalar_one()
        events = connection.execute(select(func.count()).select_from(Event)).scalar_one()
    return tasks, events


def wait_for_task(tracking: Tracking, task_id: str, timeout: float = 30.0) -> Any:
    """The task's view once every job is done (as SQL says)."""

    def done() -> Any:
        view = tracking.get_task(task_id)
        return view if view.status in ("finished", "finished_with_errors", "cancelled") else None

    return wait_until(done, timeout, interval=0.05)
