"""``GET /api/periodic``: an operator tenant's token lists the broker's schedules, by name, with
their last and next runs; any other token is refused (403), a missing or bad one as everywhere
(401). On the Redis broker and on the SQL broker, each with SQLite and PostgreSQL.

The schedules are put in the broker by the library's scheduler, driven by an explicit clock a
month ahead, so that the runs it records and the next runs the API computes are exact.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

import asynctask
from asynctask import Registry, Settings
from asynctask.brokers import open_broker
from asynctask.middleware import Chain
from asynctask.periodic import Schedule, Schedules
from asynctask.tokens import create_token, revoke_token
from asynctask.worker.periodic import Scheduler
from tests.conftest import fresh_postgres_schema
from tests.webapi.conftest import Api, MakeApi, sql_broker
from tests.webapi.test_api import error_of
from webapi.config import ApiConfig

#: 18:30 UTC a month from now: the scheduler's clock, ahead of the real one, so the next run the
#: API computes (from the later of now and the last tick) follows the recorded last tick.
T0 = (int(time.time()) // 86400 + 30) * 86400 + 18 * 3600 + 30 * 60
OPERATORS = ("ops", "admin")


@pytest.fixture
def api(make: MakeApi) -> Api:
    return make(operator_tenants=OPERATORS)


def operator(api: Api, tenant: str = "ops") -> str:
    return create_token(api.engine, tenant).token


def declare(
    settings: Settings, *schedules: Schedule, take_at: float, paused: tuple[str, ...] = ()
) -> list[str]:
    """Declare ``schedules`` at ``T0`` as a worker does, take the ticks due at ``take_at``, pause
    ``paused``; the jids pushed."""
    registry = Registry()

    @asynctask.job(registry=registry)
    def beat() -> None: ...

    @asynctask.job(registry=registry, queue="reports")
    def report() -> None: ...

    declared = Schedules()
    for schedule in schedules:
        declared.add(schedule)
    broker = open_broker(settings)
    try:
        scheduler = Scheduler(broker.periodic, declared, registry, Chain(), "webapi-test")
        scheduler.declare(T0)
        pushed = scheduler.take(take_at)
        for name in paused:
            assert broker.periodic.set_paused(name, True)
    finally:
        broker.close()
    return pushed


def test_an_operator_lists_the_schedules_by_name(api: Api) -> None:
    pushed = declare(
        api.client.settings,
        Schedule("yearly", "report", "0 0 1 1 *"),
        Schedule("nightly", "report", "0 3 * * *", tz="Asia/Tokyo", catch_up="none"),
        Schedule("every-second", "beat", "* * * * * *"),
        take_at=T0 + 1.25,
        paused=("every-second",),
    )
    assert len(pushed) == 1
    response = api.get("/api/periodic", operator(api))
    assert response.status_code == 200, response.get_json()
    assert response.mimetype == "application/json"
    # Times as the API writes every time: ISO 8601 in UTC.
    day = datetime.fromtimestamp(T0, UTC).date()
    assert response.get_json() == {
        "schedules": [
            {
                "name": "every-second",
                "job": "beat",
                "cron": "* * * * * *",
                "tz": "UTC",
                "queue": "default",
                "catch_up": "latest",
                "paused": True,
                "next_run": f"{day}T18:30:02+00:00",
                "last_run": f"{day}T18:30:01+00:00",
                "last_jid": pushed[0],
                "last_enqueued_at": f"{day}T18:30:01.250000+00:00",
            },
            {
                "name": "nightly",
                "job": "report",
                "cron": "0 3 * * *",
                "tz": "Asia/Tokyo",
                "queue": "reports",
                "catch_up": "none",
                "paused": False,
                # 03:00 in Tokyo is 18:00 UTC: declared half an hour after a tick, it starts there.
                "next_run": f"{day + timedelta(days=1)}T18:00:00+00:00",
                "last_run": f"{day}T18:00:00+00:00",
                "last_jid": None,
                "last_enqueued_at": None,
            },
            {
                "name": "yearly",
                "job": "report",
                "cron": "0 0 1 1 *",
                "tz": "UTC",
                "queue": "reports",
                "catch_up": "latest",
                "paused": False,
                # Declared months after its latest tick: it starts there all the same.
                "next_run": f"{day.year + 1}-01-01T00:00:00+00:00",
                "last_run": f"{day.year}-01-01T00:00:00+00:00",
                "last_jid": None,
                "last_enqueued_at": None,
            },
        ]
    }


def test_names_are_in_code_point_order_whatever_the_databases_collation(registry: Registry) -> None:
    names = ["b", "B-2", "a_1", "A"]
    with fresh_postgres_schema() as url, sql_broker(url, registry) as make_sql:
        api = make_sql(operator_tenants=OPERATORS)
        with api.engine.begin() as connection:
            connection.exec_driver_sql(
                'ALTER TABLE asynctask_periodic ALTER COLUMN name TYPE varchar(200) COLLATE "und-x-icu"'
            )
        declare(api.client.settings, *(Schedule(n, "beat", "0 * * * *") for n in names), take_at=T0)
        with api.engine.connect() as connection:
            by_database = connection.exec_driver_sql("SELECT name FROM asynctask_periodic ORDER BY name")
            assert list(by_database.scalars()) != sorted(names)
        listed = api.get("/api/periodic", operator(api)).get_json()["schedules"]
    assert [s["name"] for s in listed] == sorted(names) == ["A", "B-2", "a_1", "b"]


def test_without_schedules_the_list_is_empty(api: Api) -> None:
    response = api.get("/api/periodic", operator(api))
    assert (response.status_code, response.get_json()) == (200, {"schedules": []})


def test_a_token_of_another_tenant_is_refused(api: Api) -> None:
    declare(api.client.settings, Schedule("nightly", "report", "0 3 * * *"), take_at=T0)
    for token in (api.acme, api.globex, operator(api, "op"), operator(api, "ops-team")):
        response = api.get("/api/periodic", token)
        assert response.status_code == 403
        error = error_of(response)
        assert error["code"] == "operator_only"
        assert "nightly" not in response.get_data(as_text=True)


def test_no_tenant_is_an_operator_by_default(make: MakeApi) -> None:
    api = make()
    response = api.get("/api/periodic", operator(api))
    assert (response.status_code, error_of(response)["code"]) == (403, "operator_only")


def test_an_operator_token_lists_the_schedules_whatever_its_tenant(make: MakeApi) -> None:
    api = make()
    declare(api.client.settings, Schedule("nightly", "report", "0 3 * * *"), take_at=T0)
    made = create_token(api.engine, "acme", operator=True)
    response = api.get("/api/periodic", made.token)
    assert response.status_code == 200, response.get_json()
    assert [s["name"] for s in response.get_json()["schedules"]] == ["nightly"]
    # Revoked, it is no one's (the verifier keeps nothing: token_cache_seconds is 0 here).
    assert revoke_token(api.engine, made.id)
    assert api.get("/api/periodic", made.token).status_code == 401


@pytest.mark.parametrize(
    "authorization", [None, "Bearer", "Basic dXNlcjpwYXNz", "Bearer atk_nope", "revoked"]
)
def test_without_a_valid_token_the_answer_is_401(api: Api, authorization: str | None) -> None:
    if authorization == "revoked":
        made = create_token(api.engine, "ops")
        assert revoke_token(api.engine, made.id)
        authorization = f"Bearer {made.token}"
    headers = {} if authorization is None else {"Authorization": authorization}
    response = api.http.get("/api/periodic", headers=headers)
    assert response.status_code == 401
    assert error_of(response)["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_the_operators_are_read_from_the_environment(make: MakeApi, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNCTASK_API_OPERATOR_TENANTS", " ops , admin,,")
    api = make()
    assert api.app.extensions["asynctask"].config.operator_tenants == ("ops", "admin")
    assert api.get("/api/periodic", operator(api, "admin")).status_code == 200
    assert api.get("/api/periodic", api.acme).status_code == 403


def test_with_auth_off_every_caller_lists_the_schedules(make: MakeApi) -> None:
    api = make(auth=False)
    declare(api.client.settings, Schedule("nightly", "report", "0 3 * * *"), take_at=T0)
    response = api.http.get("/api/periodic")
    assert response.status_code == 200
    assert [s["name"] for s in response.get_json()["schedules"]] == ["nightly"]


def test_one_string_is_not_a_list_of_operators() -> None:
    with pytest.raises(ValueError, match="operator_tenants"):
        ApiConfig.from_env({}, operator_tenants="ops")
