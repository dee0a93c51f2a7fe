"""The read-model tests' backends (``store``: Redis, SQLite, PostgreSQL) and hand-written
Sidekiq payloads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis

from asynctask import Client, Registry, Settings, payload
from asynctask.api.reader import close_shared
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain
from asynctask.tasks.service import Tracking
from asynctask.worker import Worker
from tests.api.stores import RedisStore, SqlStore, Store
from tests.conftest import fresh_postgres_schema

BACKENDS = ("redis", "sqlite", "postgresql")


@pytest.fixture(params=BACKENDS)
def store(
    request: pytest.FixtureRequest, redis_settings: Settings, conn: redis.Redis, tmp_path: Path
) -> Iterator[Store]:
    """Each backend, empty and private to the test: the Redis namespace of ``redis_settings``, a
    fresh SQLite file, or a fresh PostgreSQL schema, migrated."""
    if request.param == "redis":
        yield RedisStore(redis_settings, conn)
    else:
        yield from _sql_store(request.param, redis_settings, tmp_path)


@pytest.fixture(params=BACKENDS[1:])
def sql_store(request: pytest.FixtureRequest, redis_settings: Settings, tmp_path: Path) -> Iterator[SqlStore]:
    """The SQL backends only, for what Redis does not have (priorities)."""
    yield from _sql_store(request.param, redis_settings, tmp_path)


@pytest.fixture
def store_client(store: Store, registry: Registry) -> Iterator[Client]:
    """A client pushing to ``store``."""
    client = Client(store.settings, registry=registry, middleware=Chain())
    yield client
    client.broker.close()


@pytest.fixture
def tracking(store: Store, registry: Registry, tmp_path: Path) -> Iterator[Tracking]:
    """Task tracking over ``store``'s broker (a SQL broker keeps the tables in its database)."""
    url = store.settings.broker_url
    if store.kind == "redis":
        url = f"sqlite:///{tmp_path / 'tracking.db'}"
        upgrade(url)
    settings = replace(store.settings, database_url=url)
    client = Client(settings, registry=registry, middleware=Chain())
    engine = create_database_engine(url)
    try:
        yield Tracking(client, engine)
    finally:
        client.close()
        engine.dispose()


@pytest.fixture
def start_store_worker(store: Store, start_redis_worker: Callable[..., Worker]) -> Callable[..., Worker]:
    """``start_redis_worker``'s workers on ``store``'s broker instead (the broker URL wins)."""

    def start(**overrides: Any) -> Worker:
        return start_redis_worker(broker_url=store.settings.broker_url, **overrides)

    return start


def _sql_store(kind: str, settings: Settings, tmp_path: Path) -> Iterator[SqlStore]:
    if kind == "sqlite":
        yield from _migrated(kind, f"sqlite:///{tmp_path / 'broker.db'}", settings)
        return
    with fresh_postgres_schema() as url:
        yield from _migrated(kind, url, settings)


def _migrated(kind: str, url: str, settings: Settings) -> Iterator[SqlStore]:
    upgrade(url)
    engine = create_database_engine(url)
    try:
        yield SqlStore(kind, replace(settings, broker_url=url), engine)
    finally:
        engine.dispose()
        # The readers' shared pools would otherwise keep connections to a dropped schema.
        close_shared()


def sidekiq_job(**fields: Any) -> payload.JobDict:
    """A job as Sidekiq 6/7 writes it (key order included); ``fields`` override or add keys."""
    stamp = payload.now()
    job: payload.JobDict = {
        "retry": True,
        "queue": "default",
        "args": [1, "ünï"],
        "class": "HardJob",
        "jid": payload.new_jid(),
        "created_at": stamp,
        "enqueued_at": stamp,
    }
    job.update(fields)
    return job
