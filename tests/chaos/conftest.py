"""Fixtures of the chaos suite: private servers it may pause, kill and restart, and workers.

Everything runs against servers of its own (never the shared 6379/5432): a redis-server on
a free port, a PostgreSQL cluster from tests/pg_instance.py, a SQLite file. All are torn
down whatever happens: workers are killed (their whole process group), servers killed and
their directories removed.

A machine that cannot run a private server skips these tests, except under CI (CI=true),
where a skip would hide that the suite did not run: there they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from asynctask import Settings
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from tests.chaos.redis_server import PrivateRedis, RedisUnavailable, private_redis
from tests.chaos.state import RedisState, SqlState
from tests.chaos.workers import Runs, WorkerPool
from tests.conftest import private_server
from tests.pg_instance import PrivatePostgres


@pytest.fixture
def redis_server() -> Iterator[PrivateRedis]:
    yield from private_server(private_redis, RedisUnavailable, "a private redis-server")


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path / "runs.txt")


@pytest.fixture
def pool(tmp_path: Path, runs: Runs) -> Iterator[WorkerPool]:
    workers = WorkerPool(tmp_path, runs.path)
    try:
        yield workers
    finally:
        workers.close()


@pytest.fixture
def redis_state(redis_server: PrivateRedis, tmp_path: Path) -> Iterator[RedisState]:
    # The whole server is the test's; a namespace still checks that every key honours it.
    settings = Settings(
        redis_url=redis_server.url, namespace="chaos", database_url=f"sqlite:///{tmp_path / 'tracking.db'}"
    )
    state = RedisState(redis_server.url, settings)
    try:
        yield state
    finally:
        state.close()


@pytest.fixture
def postgres_state(postgres_server: PrivatePostgres) -> Iterator[SqlState]:
    yield from _sql_state(postgres_server.url)


@pytest.fixture
def sqlite_state(tmp_path: Path) -> Iterator[SqlState]:
    yield from _sql_state(f"sqlite:///{tmp_path / 'broker.db'}")


def _sql_state(url: str) -> Iterator[SqlState]:
    upgrade(url)
    state = SqlState(create_database_engine(url), Settings(broker_url=url))
    try:
        yield state
    finally:
        state.close()
