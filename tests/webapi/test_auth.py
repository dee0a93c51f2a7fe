"""The bearer-token check: what a refusal says, tokens unknown when tried are not remembered, the
verified-token cache (a status poll costs no token query, and a revoked token stops working
within ``token_cache_seconds``; the other API tests turn the cache off), and auth turned off."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError

from asynctask import Client, Registry, Settings, Tracking, job
from asynctask.db.engine import writer
from asynctask.db.migrate import upgrade
from asynctask.tokens import Caller, create_token, hash_token, revoke_token
from asynctask.tracking.models import ApiToken, Task
from tests.conftest import wait_until
from tests.webapi.conftest import Api, close_watchers
from webapi import create_app
from webapi.embed import SPARE_CONNECTIONS

#: Short enough to wait out, long enough to see a revoked token still accepted from the cache.
CACHE_SECONDS = 1.0


def test_a_revoked_token_stops_working_within_the_cache_time(make_api: Callable[..., Api]) -> None:
    api = make_api(token_cache_seconds=CACHE_SECONDS)
    made = create_token(api.engine, "acme")
    assert api.get("/api/tasks", made.token).status_code == 200
    revoke_token(api.engine, made.id)
    # Within the cache time, plus a margin for the requests themselves.
    wait_until(lambda: api.get("/api/tasks", made.token).status_code == 401, timeout=CACHE_SECONDS + 0.9)
    assert api.get("/api/tasks", made.token).get_json()["error"]["code"] == "unauthorized"
    # Revoking one token leaves the tenant's other tokens working.
    assert api.get("/api/tasks", api.acme).status_code == 200


def test_a_verified_token_is_served_from_the_cache(make_api: Callable[..., Api]) -> None:
    api = make_api(token_cache_seconds=60.0)
    made = create_token(api.engine, "acme")
    assert api.get("/api/tasks", made.token).status_code == 200
    revoke_token(api.engine, made.id)
    # Remembered: the token is not looked up again within the cache time.
    assert api.get("/api/tasks", made.token).status_code == 200
    # A token never verified is looked up, and refused, at once.
    fresh = create_token(api.engine, "acme")
    revoke_token(api.engine, fresh.id)
    assert api.get("/api/tasks", fresh.token).status_code == 401


MISSING = "send the header Authorization: Bearer <token>"
UNKNOWN = "the token is unknown or revoked"


@pytest.mark.parametrize(
    ("authorization", "message"),
    [
        (None, MISSING),
        ("Bearer", MISSING),
        ("Bearer   ", MISSING),
        ("Basic dXNlcjpwYXNz", MISSING),
        ("Bearer atk_nope", UNKNOWN),
        ("bearer atk_nope", UNKNOWN),
        ("Bearer atk_nope with words after it", UNKNOWN),
    ],
)
def test_a_refusal_says_what_is_wrong(
    make_api: Callable[..., Api], authorization: str | None, message: str
) -> None:
    api = make_api(token_cache_seconds=60.0)
    headers = {} if authorization is None else {"Authorization": authorization}
    response = api.http.get("/api/tasks", headers=headers)
    assert response.status_code == 401
    error = response.get_json()["error"]
    assert (error["code"], error["message"]) == ("unauthorized", message)


def test_a_token_refused_once_is_not_remembered(make_api: Callable[..., Api]) -> None:
    api = make_api(token_cache_seconds=60.0)
    token = "atk_" + "made-up-and-tried-before-it-exists".ljust(43, "x")
    assert api.get("/api/tasks", token).status_code == 401
    # The same token is issued afterwards (as if the guess had been right): it works at once.
    with writer(api.engine).begin() as connection:
        connection.execute(
            insert(ApiToken).values(
                id="tried0000000", tenant="acme", token_hash=hash_token(token), created_at=datetime.now(UTC)
            )
        )
    assert api.get("/api/tasks", token).status_code == 200


def test_with_auth_off_the_api_sees_every_task(
    make_api: Callable[..., Api], redis_tracking: Tracking, registry: Registry
) -> None:
    api = make_api(auth=False)

    @job(registry=registry)
    def library_job(items: list[int]) -> None:
        pass

    # Created by the library, without a tenant, as a script would.
    task = redis_tracking.create_task(library_job, [1])
    response = api.http.get(f"/api/tasks/{task.id}")
    assert response.status_code == 200 and response.get_json()["id"] == task.id
    assert [t["id"] for t in api.http.get("/api/tasks").get_json()["items"]] == [task.id]


def test_a_request_that_finds_every_connection_taken_gets_503_with_retry_after_at_once(
    tracked_client: Client, tracked_settings: Settings, database_engine: Engine
) -> None:
    token = create_token(database_engine, "acme").token
    app = create_app(
        {"settings": tracked_settings, "threads": 1, "pool_timeout": 0.2, "token_cache_seconds": 0.0},
        client=tracked_client,
    )
    pool = app.extensions["asynctask"].engine
    held = [pool.connect() for _ in range(1 + SPARE_CONNECTIONS)]
    try:
        began = time.monotonic()
        response = app.test_client().get("/api/tasks", headers={"Authorization": f"Bearer {token}"})
        assert time.monotonic() - began < 2.0
        assert response.status_code == 503
        assert response.get_json()["error"]["code"] == "database_busy"
        assert response.headers["Retry-After"] == "1"
    finally:
        for connection in held:
            connection.close()
    response = app.test_client().get("/api/tasks", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    pool.dispose()


def test_a_sql_broker_draws_from_the_apis_own_pool(tmp_path: Path) -> None:
    """One pool per process, sized to its threads: a SQL broker built by the API reads through
    it, so a process never asks the database for a second pool's worth of connections."""
    url = f"sqlite:///{tmp_path / 'api.db'}"
    upgrade(url)
    settings = Settings(broker_url=url, database_url=url)
    app = create_app({"settings": settings, "auth": False, "threads": 1, "pool_timeout": 0.2})
    pool = app.extensions["asynctask"].engine
    held = [pool.connect() for _ in range(1 + SPARE_CONNECTIONS)]
    try:
        response = app.test_client().get("/api/queues")
        assert response.status_code == 503
        assert response.get_json()["error"]["code"] == "database_busy"
    finally:
        for connection in held:
            connection.close()
    assert app.test_client().get("/api/queues").status_code == 200
    close_watchers([app])
    app.extensions["asynctask"].client.close()
    pool.dispose()


def test_the_deployment_s_token_sees_every_tenant_s_tasks_and_calls_the_operator_endpoints(
    api: Api,
) -> None:
    task_id = api.post_json({"job": "echo", "items": [1]}).get_json()["task_id"]
    deployment = create_token(api.engine, None, operator=True).token
    response = api.get(f"/api/tasks/{task_id}", deployment)
    assert response.status_code == 200 and response.get_json()["id"] == task_id
    assert api.get(f"/api/tasks/{task_id}", api.globex).status_code == 404
    assert api.get("/api/queues", deployment).status_code == 200
    # What it creates is no tenant's, as a script's task is.
    own = api.post_json({"job": "echo", "items": [2]}, deployment).get_json()["task_id"]
    with api.engine.connect() as connection:
        assert connection.execute(select(Task.tenant).where(Task.id == own)).scalar_one() is None
    assert api.get(f"/api/tasks/{own}", api.acme).status_code == 404


def test_a_caller_of_no_tenant_is_an_operator_or_nobody(api: Api) -> None:
    with pytest.raises(ValueError, match="must be an operator's"):
        Caller(None, operator=False)
    with pytest.raises(ValueError, match="must be an operator's"):
        create_token(api.engine, None)
    # The table holds no such token either, whoever writes to it.
    with pytest.raises(IntegrityError), writer(api.engine).begin() as connection:
        connection.execute(
            insert(ApiToken).values(
                id="nobody", tenant=None, token_hash="0" * 64, created_at=datetime.now(UTC), operator=False
            )
        )
