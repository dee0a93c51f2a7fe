"""The broker suite's fixtures: every test runs once per backend (Redis, SQLite, PostgreSQL).

``settings`` is parametrised here, so the suite's tests and the fixtures built on it
(``client``, ``start_worker``) run against a fresh key namespace in Redis, a fresh SQLite
file, or a fresh PostgreSQL schema. Everything else goes through the public API. The Redis-only
tests beside them use tests/conftest.py's ``redis_settings``, ``redis_client`` and
``start_redis_worker`` instead, and run once.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
from sqlalchemy import Engine

from asynctask import AsyncTracking, Client, Registry, Settings, Tracking
from asynctask.api.reader import close_shared
from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.redis.fetch import ReliableFetch
from asynctask.brokers.sql import SqlBroker
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain, TrackingClientMiddleware
from asynctask.worker import Worker
from tests.conftest import REDIS_URL, fast_settings, fresh_postgres_schema, started_workers
from tests.processes import Sessions, worker_argv
from tests.records import written_lines

ROOT = Path(__file__).resolve().parents[2]
#: The job module the worker subprocesses load (-r).
BROKER_JOBS = ROOT / "tests" / "jobs" / "broker_jobs.py"

BACKENDS = ("redis", "sqlite", "postgresql")


F = TypeVar("F", bound=Callable[..., Any])


def awaited_job(func: F) -> F:
    """An ``async def`` job function (same name and signature) that awaits once, then does what
    ``func`` does (a generator: an async generator awaiting before each of its values)."""
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        async def iterate(*args: Any, **kwargs: Any) -> Any:
            for value in func(*args, **kwargs):
                await asyncio.sleep(0)
                yield value

        return cast(F, iterate)

    @functools.wraps(func)
    async def run(*args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        return func(*args, **kwargs)

    return cast(F, run)


@pytest.fixture(params=["sync", "async"])
def job_kind(request: pytest.FixtureRequest) -> Callable[[F], F]:
    """A decorator for a test's job function, under ``@asynctask.job``: the function itself, or
    its ``awaited_job``. A test using it runs once for each kind of job."""
    if request.param == "sync":
        return lambda func: func
    return awaited_job


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """Settings whose broker is empty and private to this test."""
    yield from backend_settings(backend, request, tmp_path)


def backend_settings(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """``settings`` of ``backend``: also "redis+postgresql", Redis with its tracking in a fresh
    PostgreSQL schema (plain "redis" tracks in a SQLite file)."""
    if backend == "redis+postgresql":
        with fresh_postgres_schema() as tracking:
            yield fast_settings(
                redis_url=REDIS_URL, namespace=request.getfixturevalue("namespace"), database_url=tracking
            )
        return
    if backend == "redis":
        namespace = request.getfixturevalue("namespace")
        # Tracking needs a database even on Redis: keep it out of the working directory.
        tracking = f"sqlite:///{tmp_path / 'tracking.db'}"
        yield fast_settings(redis_url=REDIS_URL, namespace=namespace, database_url=tracking)
        return
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'broker.db'}"
        upgrade(url)
        yield fast_settings(broker_url=url)
        close_shared()
        return
    with fresh_postgres_schema() as url:
        upgrade(url)
        yield fast_settings(broker_url=url)
        # The read API keeps one pool per URL; each test's schema is a new URL.
        close_shared()


MakeClient = Callable[..., Client]
#: ``job_kind``: the decorator making a test's job sync or async.
JobKind = Callable[[Callable[..., Any]], Callable[..., Any]]


@pytest.fixture
def make_client(settings: Settings, registry: Registry) -> Iterator[MakeClient]:
    """Clients on the test's broker (``settings`` fields can be overridden); closed afterwards,
    so that a SQL client's connections do not outlive the test."""
    made: list[Client] = []

    def make(middleware: Chain[Any] | None = None, registry: Registry = registry, **overrides: Any) -> Client:
        own = Settings(**{**settings.__dict__, **overrides})
        made.append(Client(own, registry=registry, middleware=Chain() if middleware is None else middleware))
        return made[-1]

    yield make
    for client in made:
        client.broker.close()


@pytest.fixture
def client(make_client: MakeClient) -> Client:
    return make_client()


@pytest.fixture
def start_worker(settings: Settings, registry: Registry) -> Iterator[Callable[..., Worker]]:
    """In-process workers on ``settings`` (tests/conftest.py's ``started_workers``)."""
    yield from started_workers(settings, registry)


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of an ``asynctask worker`` subprocess using the same broker as ``settings``.

    Variables of the caller's environment that name another broker or database are dropped,
    so a developer's shell cannot point a test's worker elsewhere.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_") and k != "REDIS_URL"}
    if settings.uses_redis:
        env |= {
            "ASYNCTASK_REDIS_URL": settings.redis_url,
            "ASYNCTASK_NAMESPACE": settings.namespace,
            "ASYNCTASK_DATABASE_URL": settings.database_url,
        }
    else:
        env["ASYNCTASK_BROKER_URL"] = settings.broker_url
    env |= {
        "ASYNCTASK_HEARTBEAT_INTERVAL": str(settings.heartbeat_interval),
        "ASYNCTASK_PROCESS_TTL": str(settings.process_ttl),
        "ASYNCTASK_SCHEDULED_POLL_INTERVAL": str(settings.scheduled_poll_interval),
    }
    return env | extra


@dataclass(frozen=True)
class Run:
    """One line of the runs file written by tests/jobs/broker_jobs.py."""

    event: str
    jid: str
    pid: int
    at: float


def read_runs(path: Path) -> list[Run]:
    runs = []
    for line in written_lines(path):
        event, jid, pid, at = line.split()
        runs.append(Run(event, jid, int(pid), float(at)))
    return runs


SpawnWorker = Callable[..., "subprocess.Popen[bytes]"]


@pytest.fixture
def redis_broker(redis_settings: Settings) -> Iterator[RedisBroker]:
    """A Redis broker whose "default" queue is a fifo one: its task's jobs wait in
    queue:default, which the Redis-only suites read (a fair queue's shares are tried in
    fair_share/test_redis.py, which gives itself a plain broker)."""
    made = RedisBroker(redis_settings)
    made.redis.sadd(made.keys.fifo, "default")
    yield made
    made.close()


@pytest.fixture
def fetch(redis_broker: RedisBroker) -> ReliableFetch:
    return redis_broker.fetcher("proc-1")


@pytest.fixture
def runs_file(tmp_path: Path) -> Path:
    """Where the worker subprocesses' jobs record their runs."""
    return tmp_path / "runs.txt"


@pytest.fixture
def spawn_worker(settings: Settings, runs_file: Path) -> Iterator[SpawnWorker]:
    """Start ``python -m asynctask worker -r tests/jobs/broker_jobs.py`` subprocesses (or
    another job module of tests/jobs/ given as ``jobs``), with ``extra`` environment variables.

    Each runs in its own session, so that killing its process group also ends any child it
    started; those still running at teardown are killed.
    """
    sessions = Sessions()

    def spawn(
        concurrency: int = 5, timeout: float = 5.0, jobs: Path = BROKER_JOBS, **extra: str
    ) -> subprocess.Popen[bytes]:
        argv = worker_argv(jobs, "-c", str(concurrency), "-t", str(timeout))
        return sessions.start(argv, worker_env(settings, ASYNCTASK_TEST_RUNS=str(runs_file), **extra), ROOT)

    yield spawn
    sessions.kill()


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """The tracking database of this test's broker (on Redis, a SQLite file it migrates)."""
    if settings.uses_redis:
        upgrade(settings.database_url)
    created = create_database_engine(settings.database_url)
    yield created
    created.dispose()


@pytest.fixture
def tracking(make_client: MakeClient, engine: Engine) -> Tracking:
    """Task tracking through this test's broker, recording pushes of tracked jobs."""
    return Tracking(make_client(middleware=Chain([TrackingClientMiddleware()])), engine)


class AwaitedTracking:
    """``Tracking``'s calls made through ``AsyncTracking`` (``create_task`` awaits
    ``acreate_task``), each on an event loop of this object's own: a test written against the
    sync calls checks the awaited ones."""

    def __init__(self, settings: Settings, registry: Registry) -> None:
        self.loop = asyncio.new_event_loop()
        self.awaited = AsyncTracking(
            settings, middleware=Chain([TrackingClientMiddleware()]), registry=registry
        )

    def __getattr__(self, name: str) -> Callable[..., Any]:
        call = getattr(self.awaited, "a" + name)
        return lambda *args, **kwargs: self.loop.run_until_complete(call(*args, **kwargs))

    def close(self) -> None:
        self.loop.run_until_complete(self.awaited.aclose())
        self.loop.close()


# The SQL broker's own tests (tests/brokers/test_sql_*.py, tests/brokers/<feature>/test_sql.py)
# drive a broker directly, on ``database_url`` (tests/conftest.py: SQLite, PostgreSQL, or both).


def sql_settings(url: str, **fields: Any) -> Settings:
    defaults: dict[str, Any] = {
        "concurrency": 4,
        "heartbeat_interval": 0.5,
        "process_ttl": 3,
        "fetch_timeout": 0.5,
    }
    return Settings(broker_url=url, **{**defaults, **fields})


@pytest.fixture
def sql_url(database_url: str) -> str:
    upgrade(database_url)
    return database_url


@pytest.fixture
def make_sql_broker(sql_url: str) -> Iterator[Callable[..., SqlBroker]]:
    """Brokers on the test database (closed afterwards), with settings overridden by keyword."""
    opened: list[SqlBroker] = []

    def make(**fields: Any) -> SqlBroker:
        broker = SqlBroker(sql_settings(sql_url, **fields))
        opened.append(broker)
        return broker

    yield make
    for broker in opened:
        broker.close()


@pytest.fixture
def sql_broker(make_sql_broker: Callable[..., SqlBroker]) -> SqlBroker:
    return make_sql_broker()
