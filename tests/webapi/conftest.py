"""Fixtures for API tests: an app on a fresh tracking database and Redis namespace, with a
registry of API jobs, two tenants' tokens, and tracked workers to run the jobs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import Engine

import asynctask
from asynctask import Client, JobFailed, Registry, Settings
from asynctask.api.reader import close_shared
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain, TrackingClientMiddleware
from asynctask.tokens import create_token
from tests.conftest import wait_until
from webapi import create_app
from webapi.resources import EXTENSION

PRODUCT_SCHEMA = {
    "type": "object",
    "required": ["sku", "price"],
    "properties": {
        "sku": {"type": "string", "minLength": 1},
        "price": {"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]+)?$"},
    },
}
#: Small limits, so that every limit can be hit by a small request.
LIMITS = {"max_items": 50, "max_chunk_size": 10, "max_body_bytes": 16 * 1024, "max_json_depth": 6}


CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium, checked before any server starts."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (Debian package chromium)")
    return CHROMIUM


def define_jobs(registry: Registry) -> None:
    @asynctask.job(api=True, item_schema=PRODUCT_SCHEMA, registry=registry)
    def import_products(rows: list[dict[str, str]]) -> None:
        """Create products from rows of a sheet.

        A negative price is a business failure; SKU "BUG" is a programming error.
        """
        for row in rows:
            if row["sku"] == "BUG":
                raise RuntimeError("bug in the importer")
            if float(row["price"]) < 0:
                raise JobFailed(f"price must be positive for SKU {row['sku']}")

    @asynctask.job(api=True, registry=registry)
    def echo(items: list[Any]) -> None:
        """Do nothing with any items."""

    @asynctask.job(registry=registry)
    def internal(items: list[Any]) -> None:
        """Not submittable through the API."""


@dataclass(frozen=True)
class Api:
    app: Flask
    http: FlaskClient
    engine: Engine
    client: Client
    #: Bearer tokens of tenants "acme" and "globex".
    acme: str
    globex: str

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.acme}"}

    def post_json(self, body: Any, token: str | None = None) -> Any:
        return self.http.post("/api/tasks", json=body, headers=self.headers(token))

    def get(self, url: str, token: str | None = None) -> Any:
        return self.http.get(url, headers=self.headers(token))

    def post(self, url: str, token: str | None = None, **kwargs: Any) -> Any:
        return self.http.post(url, headers=self.headers(token), **kwargs)

    def wait_settled(self, task_id: str, timeout: float = 30.0) -> dict[str, Any]:
        def settled() -> dict[str, Any] | None:
            body: dict[str, Any] = self.get(f"/api/tasks/{task_id}").get_json()
            return body if body["status"] in ("finished", "finished_with_errors", "cancelled") else None

        result: dict[str, Any] = wait_until(settled, timeout, interval=0.05)
        return result


def close_watchers(apps: list[Flask]) -> None:
    """Stop the apps' stream readers before their engines are disposed: a read in flight at
    the disposal would leave its connection open, to be found by the garbage collector during
    some later test (psycopg warns, and the warning fails that test)."""
    for app in apps:
        app.extensions[EXTENSION].watcher.close()


@pytest.fixture
def make_api(
    registry: Registry, tracked_client: Client, tracked_settings: Settings, database_engine: Engine
) -> Iterator[Callable[..., Api]]:
    define_jobs(registry)
    acme = create_token(database_engine, "acme").token
    globex = create_token(database_engine, "globex").token
    apps: list[Flask] = []

    def make(**config: Any) -> Api:
        settings = {"settings": tracked_settings, "stream_interval": 0.05, "token_cache_seconds": 0.0}
        app = create_app({**settings, **LIMITS, **config}, client=tracked_client, engine=database_engine)
        app.testing = True
        apps.append(app)
        return Api(app, app.test_client(), database_engine, tracked_client, acme, globex)

    yield make
    close_watchers(apps)


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Iterator[Api]:
    yield make_api()


MakeApi = Callable[..., Api]


@pytest.fixture(params=["redis", "sql"])
def make(request: pytest.FixtureRequest, database_url: str, registry: Registry) -> Iterator[MakeApi]:
    """``make_api`` of tests/webapi/conftest.py on the Redis broker, or its like on a SQL broker
    in the tracking database."""
    if request.param == "redis":
        yield request.getfixturevalue("make_api")
        return
    with sql_broker(database_url, registry) as make_sql:
        yield make_sql


@contextmanager
def sql_broker(url: str, registry: Registry) -> Iterator[MakeApi]:
    """Apps on the SQL broker at ``url`` (an empty database), with tokens of acme and globex."""
    upgrade(url)
    settings = Settings(broker_url=url, database_url=url)
    client = Client(settings, registry=registry, middleware=Chain([TrackingClientMiddleware()]))
    engine = create_database_engine(url)
    acme, globex = create_token(engine, "acme").token, create_token(engine, "globex").token
    apps: list[Flask] = []

    def make_sql(**config: Any) -> Api:
        base = {"settings": settings, "token_cache_seconds": 0.0, **LIMITS}
        app = create_app({**base, **config}, client=client, engine=engine)
        app.testing = True
        apps.append(app)
        return Api(app, app.test_client(), engine, client, acme, globex)

    try:
        yield make_sql
    finally:
        close_watchers(apps)
        client.close()
        engine.dispose()
        # The app's schedule reader opened the broker URL's shared engine.
        close_shared()
