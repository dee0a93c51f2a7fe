"""Fixtures over the real Redis: every test gets its own key namespace and removes only its keys."""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from sqlalchemy.exc import OperationalError

from asynctask import Client, Registry, Schedules, Settings, job, log
from asynctask.db.engine import create_database_engine
from asynctask.middleware import Chain
from asynctask.payload import JobDict
from asynctask.tracking.views import Page
from asynctask.worker import Worker
from tests.pg_instance import PostgresUnavailable, PrivatePostgres, private_postgres
from tests.processes import free_port

pytest_plugins = ["tests.tracking_fixtures"]

REDIS_URL = os.environ.get("ASYNCTASK_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("ASYNCTASK_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: The first Redis database handed out by ``claimed_db``; lower ones are left alone.
FIRST_TEST_DB = 4

S = TypeVar("S")
T = TypeVar("T")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests (marked ``slow``: the chaos drains, the bench's smoke run) first, in their
    order, the others after them in theirs: pytest-xdist hands tests out in this order, so the
    long ones start while the short ones fill the other workers, rather than last, alone."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def restored_logging() -> Iterator[None]:
    """Put AsyncTask's loggers back as they were after each test: a command run in the test
    (``log.setup``) points them at the stderr of that moment and stops them propagating, and a
    later test's warnings would then go to a closed stream, not to pytest's capture."""
    loggers = [logging.getLogger(name) for name in ("asynctask", log.LIFECYCLE)]
    saved = [(logger.handlers[:], logger.level, logger.propagate) for logger in loggers]
    yield
    for logger, (handlers, level, propagate) in zip(loggers, saved, strict=True):
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def wait_for_beats(beat: Callable[[], float | None], count: int = 2, timeout: float = 15.0) -> None:
    """Wait for ``count`` heartbeats of a worker process from now on (``beat`` reads the time of
    its last one). The readiness signal before checking that a worker did not do something: it
    has been alive and going round its loops since, so what it was going to do it has done."""
    last = time.time()
    for _ in range(count):
        last = wait_until(lambda after=last: (at := beat()) is not None and at > after and at, timeout)


def started_threads(target: Callable[[], object], count: int) -> list[threading.Thread]:
    """``count`` threads running ``target``, started."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def run_in_threads(target: Callable[[], object], count: int, timeout: float | None) -> None:
    """Run ``target`` in ``count`` threads at once, waiting up to ``timeout`` seconds for each."""
    for thread in started_threads(target, count):
        thread.join(timeout)


def marked_queues(registry: Registry, client: Client, jobs: dict[str, int]) -> list[str]:
    """Push ``jobs[queue]`` jobs to each queue, in that order, of a job that notes the queue it
    came from; the queues noted as the jobs run, in the order they ran."""
    order: list[str] = []

    @job(registry=registry)
    def mark(queue: str) -> None:
        order.append(queue)

    for queue, count in jobs.items():
        mark.set(client=client, queue=queue).perform_bulk([[queue]] * count)
    return order


def recorded_pushes(client: Client) -> list[JobDict]:
    """The jobs ``client`` pushes from now on, as its client middleware sees them."""
    seen: list[JobDict] = []

    def record(job: JobDict, queue: str, call_next: Callable[[], Any]) -> Any:
        seen.append(job)
        return call_next()

    client.middleware.add(record)
    return seen


def all_pages(read: Callable[[str | None], Page[T]]) -> list[T]:
    """Every item of a paged listing: ``read(after)`` is the page after the cursor ``after``."""
    items: list[T] = []
    after: str | None = None
    while True:
        page = read(after)
        items += page.items
        if page.next_cursor is None:
            return items
        after = page.next_cursor


@pytest.fixture
def conn() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        pytest.fail(f"Redis is not reachable at {REDIS_URL}: {exc}")
    yield client
    client.close()


@pytest.fixture
def namespace(conn: redis.Redis) -> Iterator[str]:
    """A fresh key prefix; its keys are deleted afterwards (and only they)."""
    ns = f"attest-{uuid.uuid4().hex[:12]}"
    yield ns
    for batch in _batched(conn.scan_iter(match=f"{ns}:*", count=1000), 500):
        conn.unlink(*batch)


def fast_settings(**fields: Any) -> Settings:
    """Settings whose heartbeats, polls and shutdowns take seconds, not minutes, with ``fields``
    on top. A short idle fetch: every in-process worker's shutdown waits for its threads'
    fetches to time out."""
    timings: dict[str, Any] = {
        "concurrency": 4,
        "timeout": 5.0,
        "heartbeat_interval": 0.5,
        "process_ttl": 3,
        "scheduled_poll_interval": 0.2,
        "fetch_timeout": 0.2,
    }
    return Settings(**{**timings, **fields})


@pytest.fixture
def redis_settings(namespace: str) -> Settings:
    """The shared Redis under the test's namespace, with fast timings."""
    return fast_settings(redis_url=REDIS_URL, namespace=namespace, fetch_timeout=0.5)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty tracking database: a fresh SQLite file, or a fresh schema in PostgreSQL (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tracking.db'}"
        return
    with fresh_postgres_schema() as url:
        yield url


@contextmanager
def fresh_postgres_schema() -> Iterator[str]:
    """A URL whose search_path is a new, empty schema of the shared PostgreSQL, dropped on exit."""
    schema = f"attest_{uuid.uuid4().hex[:12]}"
    admin = create_database_engine(POSTGRES_URL)
    try:
        with admin.begin() as connection:
            connection.exec_driver_sql(f"CREATE SCHEMA {schema}")
    except OperationalError as exc:
        admin.dispose()
        pytest.fail(f"PostgreSQL is not reachable at {POSTGRES_URL}: {exc}")
    try:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as connection:
            connection.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        admin.dispose()


@contextmanager
def scratch_redis(tmp_path: Path, *options: str) -> Iterator[redis.Redis]:
    """A redis-server of the test's own on a free port, without persistence, for tests that
    break a server in ways the shared one must never be."""
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen([*argv, "--dir", str(tmp_path), *options], stdout=subprocess.DEVNULL)
    conn = redis.Redis(port=port)
    try:
        wait_until(lambda: _pings(conn) or server.poll() is not None, timeout=10)
        assert server.poll() is None, f"redis-server on port {port} did not start"
        yield conn
    finally:
        conn.close()
        server.terminate()
        server.wait(10)


def _pings(conn: redis.Redis) -> bool:
    """Whether a private redis-server started by a test answers yet."""
    try:
        return bool(conn.ping())
    except redis.ConnectionError:
        return False


def unavailable(reason: str) -> NoReturn:
    # .ci/run installs the server binaries: under CI a skip would hide that the test did not run.
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI this test must run, not skip")
    pytest.skip(reason)


def private_server(
    start: Callable[[], AbstractContextManager[S]], down: type[Exception], what: str
) -> Iterator[S]:
    """The body of a fixture yielding a private server of its own, torn down whatever happens."""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(start())
        except down as exc:
            unavailable(f"cannot run {what}: {exc}")
        yield server


@pytest.fixture
def postgres_server() -> Iterator[PrivatePostgres]:
    yield from private_server(private_postgres, PostgresUnavailable, "a private PostgreSQL server")


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def redis_client(redis_settings: Settings, registry: Registry, conn: redis.Redis) -> Client:
    """An AsyncTask client on ``redis_settings``, over ``conn``."""
    return Client(redis_settings, connection=conn, registry=registry, middleware=Chain())


def started_workers(settings: Settings, registry: Registry) -> Iterator[Callable[..., Worker]]:
    """Start in-process workers on ``settings`` (in a thread); all are stopped gracefully after
    the test. The body of the fixtures ``start_redis_worker`` here and ``start_worker`` in
    tests/brokers/conftest.py, which differ only in the settings they start from."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(**overrides: Any) -> Worker:
        kwargs = {
            k: overrides.pop(k)
            for k in ("server_middleware", "client_middleware", "schedules")
            if k in overrides
        }
        worker_settings = Settings(**{**settings.__dict__, **overrides}).validated()
        worker = Worker(
            worker_settings,
            registry=registry,
            server_middleware=kwargs.get("server_middleware", Chain()),
            client_middleware=kwargs.get("client_middleware", Chain()),
            schedules=kwargs.get("schedules", Schedules()),
        )
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
        thread.start()
        wait_until(lambda: worker.manager.busy is not None and worker._beat_thread.is_alive(), 5)
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(30)


@pytest.fixture
def start_redis_worker(redis_settings: Settings, registry: Registry) -> Iterator[Callable[..., Worker]]:
    """In-process workers on ``redis_settings`` (``started_workers``)."""
    yield from started_workers(redis_settings, registry)


def db_url(number: int) -> str:
    """``REDIS_URL`` with its database replaced by ``number`` (redis-py lets the URL's /N win over db=)."""
    parts = urlsplit(REDIS_URL)
    return urlunsplit((parts.scheme, parts.netloc, f"/{number}", parts.query, parts.fragment))


@pytest.fixture
def claimed_db(conn: redis.Redis) -> Iterator[int]:
    """An empty Redis database number, locked for this test, flushed afterwards (all its data is ours)."""
    for number in range(FIRST_TEST_DB, 16):
        lock = f"asynctask-tests:db-lock:{number}"
        if not conn.set(lock, os.getpid(), nx=True, ex=3600):
            continue
        candidate = redis.Redis.from_url(db_url(number))
        if candidate.connection_pool.connection_kwargs.get("db") != number:
            candidate.close()
            conn.delete(lock)
            pytest.fail(f"could not open Redis database {number}")
        if candidate.dbsize() == 0:
            try:
                yield number
            finally:
                candidate.flushdb()
                candidate.close()
                conn.delete(lock)
            return
        candidate.close()
        conn.delete(lock)
    pytest.fail(f"no empty Redis database between {FIRST_TEST_DB} and 15 to claim")


def _batched(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


@pytest.fixture
def redis_process_settings(namespace: str, tmp_path: Path) -> Settings:
    """A Redis broker under the test's namespace, tracking in the test's own SQLite file, for
    worker subprocesses (``worker_env``): a heartbeat every half second."""
    # A long process TTL: a record or a job that is gone was removed, not expired.
    return Settings(
        redis_url=REDIS_URL,
        namespace=namespace,
        database_url=f"sqlite:///{tmp_path / 'tracking.db'}",
        heartbeat_interval=0.5,
        process_ttl=60,
    )
