"""``POST /api/tasks`` with ``concurrency_key`` and ``concurrency_limit``, in every body type: the
chunks' payloads, the tenant's own keys, the waiting message, and bad options or items refused
with stable codes before anything is written."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from asynctask import Client, Registry, Settings
from asynctask.api.reader import close_shared
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.middleware import Chain, TrackingClientMiddleware
from asynctask.payload import JobDict
from asynctask.tokens import create_token
from tests.conftest import recorded_pushes
from tests.webapi.conftest import LIMITS, Api, define_jobs
from tests.webapi.test_api import assert_nothing_written, error_of
from webapi import create_app

ITEMS = [{"op": op, "n": n} for n, op in enumerate([7, 7, 8, 7, 8])]


def keyed(seen: list[JobDict]) -> list[tuple[str, int, list[Any]]]:
    return [(j["concurrency_key"], j["concurrency_limit"], [i["n"] for i in j["args"][0]]) for j in seen]


def test_json_body_chunks_by_key_and_the_tenant_owns_the_keys(api: Api) -> None:
    seen = recorded_pushes(api.client)
    body = {"job": "echo", "items": ITEMS, "chunk_size": 2, "concurrency_key": "operator:{op}"}
    response = api.post_json({**body, "concurrency_limit": 2})
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["jobs"] == 3
    assert keyed(seen) == [
        ('"acme"/operator:7', 2, [0, 1]),
        ('"acme"/operator:8', 2, [2, 4]),
        ('"acme"/operator:7', 2, [3]),
    ]
    assert not any("concurrency_on_failure" in j for j in seen)
    seen.clear()
    assert api.post_json({**body, "concurrency_on_failure": "continue"}, token=api.globex).status_code == 202
    assert keyed(seen)[0] == ('"globex"/operator:7', 1, [0, 1])
    assert {j["concurrency_on_failure"] for j in seen} == {"continue"}


def test_the_events_say_which_key_a_job_waits_for(api: Api) -> None:
    body = {"job": "echo", "items": ITEMS[:3], "chunk_size": 5, "concurrency_key": "operator:{op}"}
    task_id = api.post_json(body).get_json()["task_id"]
    events = api.get(f"/api/tasks/{task_id}/events").get_json()["items"]
    assert [(e["status"], [m["text"] for m in e["messages"]]) for e in events] == [
        ("enqueue", ["waiting for operator:7"]),
        ("enqueue", ["waiting for operator:8"]),
    ]


def test_csv_and_upload_take_the_options_as_fields(api: Api) -> None:
    seen = recorded_pushes(api.client)
    csv_text = "sku,price,op\nA1,1,x\nA2,2,y\nA3,3,x\n"
    response = api.post(
        "/api/tasks?job=import_products&chunk_size=5&concurrency_key=op-{op}&concurrency_limit=4"
        "&concurrency_on_failure=continue",
        data=csv_text,
        content_type="text/csv",
    )
    assert response.status_code == 202, response.get_json()
    assert [(j["concurrency_key"], j["concurrency_limit"], j["args"][0]) for j in seen] == [
        ('"acme"/op-x', 4, [{"sku": "A1", "price": "1", "op": "x"}, {"sku": "A3", "price": "3", "op": "x"}]),
        ('"acme"/op-y', 4, [{"sku": "A2", "price": "2", "op": "y"}]),
    ]
    assert {j["concurrency_on_failure"] for j in seen} == {"continue"}
    seen.clear()
    form = {
        "job": "echo",
        "concurrency_key": "{op}",
        "file": (io.BytesIO(b'{"op": 1, "n": 0}\n{"op": 1, "n": 1}\n'), "rows.ndjson"),
    }
    assert api.post("/api/tasks", data=form, content_type="multipart/form-data").status_code == 202
    assert keyed(seen) == [('"acme"/1', 1, [0]), ('"acme"/1', 1, [1])]


def test_without_auth_keys_are_not_prefixed(make_api: Any) -> None:
    api = make_api(auth=False)
    seen = recorded_pushes(api.client)
    body = {"job": "echo", "items": ITEMS[:1], "concurrency_key": "operator:{op}"}
    assert api.http.post("/api/tasks", json=body).status_code == 202
    assert keyed(seen) == [("operator:7", 1, [0])]


@pytest.mark.parametrize(
    ("options", "code", "field"),
    [
        ({"concurrency_key": "operator:{op.real}"}, "invalid_concurrency_key", "concurrency_key"),
        ({"concurrency_key": "operator:{op"}, "invalid_concurrency_key", "concurrency_key"),
        ({"concurrency_key": ""}, "invalid_concurrency_key", "concurrency_key"),
        ({"concurrency_key": 7}, "invalid_request", "concurrency_key"),
        ({"concurrency_key": None}, "invalid_request", "concurrency_key"),
        ({"concurrency_key": "k", "concurrency_limit": None}, "invalid_request", "concurrency_limit"),
        ({"concurrency_key": "k\u0000"}, "invalid_string", "concurrency_key"),
        ({"concurrency_key": "k", "concurrency_limit": 0}, "invalid_request", "concurrency_limit"),
        ({"concurrency_key": "k", "concurrency_limit": 1.5}, "invalid_request", "concurrency_limit"),
        ({"concurrency_key": "k", "concurrency_limit": True}, "invalid_request", "concurrency_limit"),
        ({"concurrency_key": "k", "concurrency_limit": "2"}, "invalid_request", "concurrency_limit"),
        ({"concurrency_key": "k", "concurrency_limit": 2**31}, "invalid_request", "concurrency_limit"),
        ({"concurrency_limit": 2}, "invalid_request", "concurrency_limit"),
        (
            {"concurrency_key": "k", "concurrency_on_failure": "skip"},
            "invalid_request",
            "concurrency_on_failure",
        ),
        ({"concurrency_on_failure": "continue"}, "invalid_request", "concurrency_on_failure"),
    ],
)
def test_bad_options_are_refused(api: Api, options: dict[str, Any], code: str, field: str) -> None:
    response = api.post_json({"job": "echo", "items": ITEMS, **options})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["details"]["field"]) == (code, field)
    assert_nothing_written(api)


@pytest.mark.parametrize(
    ("item", "key_field", "message"),
    [
        ({"n": 1}, "op", "no field 'op'"),
        ({"op": None}, "op", "null"),
        ({"op": [1]}, "op", "an array"),
        ({"op": "x" * 1000}, None, "longer than 1000"),
        (5, "op", "a number, not an object"),
    ],
)
def test_an_item_without_a_key_rolls_the_task_back(
    api: Api, item: Any, key_field: str | None, message: str
) -> None:
    body = {"job": "echo", "items": [*ITEMS, item], "concurrency_key": "operator:{op}"}
    response = api.post_json(body)
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "concurrency_key_unresolved"
    assert error["details"] == {"field": "items", "item": len(ITEMS), "key_field": key_field}
    assert message in error["message"]
    assert_nothing_written(api)


def test_a_csv_row_without_a_key_names_its_line(api: Api) -> None:
    response = api.post("/api/tasks?job=echo&concurrency_key={op}", data="n\n1\n", content_type="text/csv")
    error = error_of(response)
    assert error["code"] == "concurrency_key_unresolved"
    assert error["details"] == {"field": "items", "item": 0, "key_field": "op", "line": 2}
    response = api.post(
        "/api/tasks?job=echo&concurrency_key={op}", data="op,n\nx,1\n,2\n", content_type="text/csv"
    )
    error = error_of(response)
    assert error["code"] == "concurrency_key_unresolved" and "empty" in error["message"]
    assert error["details"] == {"field": "items", "item": 1, "key_field": None, "line": 3}
    response = api.post(
        "/api/tasks?job=echo&concurrency_key={op}&concurrency_limit=x",
        data="op\nx\n",
        content_type="text/csv",
    )
    assert error_of(response)["details"] == {"field": "concurrency_limit"}
    assert_nothing_written(api)


# --- GET /api/keys ----------------------------------------------------------------------


def jids_of(api: Api, task_id: str, token: str | None = None) -> list[str]:
    return [e["job_id"] for e in api.get(f"/api/tasks/{task_id}/events", token).get_json()["items"]]


def test_keys_list_the_tenants_own_busy_keys(api: Api) -> None:
    body = {"job": "echo", "items": [{"op": 7}] * 3, "concurrency_key": "operator:{op}"}
    acme = jids_of(api, api.post_json(body).get_json()["task_id"])
    other = {**body, "items": [{"op": 7}, {"op": 9}], "concurrency_limit": 2}
    globex = jids_of(api, api.post_json(other, token=api.globex).get_json()["task_id"], api.globex)

    response = api.get("/api/keys")
    assert response.status_code == 200
    assert response.get_json() == {
        "items": [{"key": "operator:7", "limit": 1, "holding": 1, "holders": acme[:1], "waiting": 2}]
    }
    items = api.get("/api/keys", token=api.globex).get_json()["items"]
    assert sorted(items, key=lambda k: k["key"]) == [
        {"key": "operator:7", "limit": 2, "holding": 1, "holders": globex[:1], "waiting": 0},
        {"key": "operator:9", "limit": 2, "holding": 1, "holders": globex[1:], "waiting": 0},
    ]
    assert len(api.get("/api/keys?limit=1", token=api.globex).get_json()["items"]) == 1
    assert api.http.get("/api/keys").status_code == 401


@pytest.mark.parametrize("limit", ["0", "1001", "x", "-1", ""])
def test_keys_limit_is_bounded(api: Api, limit: str) -> None:
    response = api.get(f"/api/keys?limit={limit}")
    assert response.status_code == 422
    assert error_of(response)["details"] == {"field": "limit"}


def test_keys_list_at_most_so_many_holders(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("webapi.blueprints.keys.MAX_HOLDERS", 2)
    body = {"job": "echo", "items": [{"op": 1}] * 3, "concurrency_key": "{op}", "concurrency_limit": 5}
    jids = jids_of(api, api.post_json(body).get_json()["task_id"])
    (key,) = api.get("/api/keys").get_json()["items"]
    assert (key["holding"], key["waiting"], len(key["holders"])) == (3, 0, 2)
    assert set(key["holders"]) < set(jids)


def test_without_auth_every_key_is_listed_as_stored(make_api: Any, api: Api) -> None:
    api.post_json({"job": "echo", "items": [{"op": 1}], "concurrency_key": "{op}"})
    open_api = make_api(auth=False)
    open_api.http.post("/api/tasks", json={"job": "echo", "items": [{"op": 2}], "concurrency_key": "{op}"})
    keys = sorted(k["key"] for k in open_api.http.get("/api/keys").get_json()["items"])
    assert keys == ['"acme"/1', "2"]


def test_keys_on_a_sql_broker(registry: Registry, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'broker.db'}"
    upgrade(url)
    define_jobs(registry)
    settings = Settings(broker_url=url, database_url=url)
    client = Client(settings, registry=registry, middleware=Chain([TrackingClientMiddleware()]))
    engine = create_database_engine(url)
    try:
        token = create_token(engine, "acme").token
        app = create_app({"settings": settings, **LIMITS}, client=client, engine=engine)
        http = app.test_client()
        headers = {"Authorization": f"Bearer {token}"}
        body = {"job": "echo", "items": [{"op": 1}, {"op": 1}], "concurrency_key": "{op}"}
        assert http.post("/api/tasks", json=body, headers=headers).status_code == 202
        (key,) = http.get("/api/keys", headers=headers).get_json()["items"]
        assert (key["key"], key["limit"], key["holding"], key["waiting"]) == ("1", 1, 1, 1)
    finally:
        client.close()
        engine.dispose()
        close_shared()
