"""Fed tasks through the HTTP API: created with ``parallel``, ``interval`` and ``priority`` from
every kind of body, tuned (``PATCH``), paused and resumed, and every refusal with its code and
field; real Redis broker, SQLite and PostgreSQL tracking."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest

from asynctask.tokens import create_token
from tests.webapi.conftest import Api
from tests.webapi.test_api import error_of, queued

ROWS = [{"sku": f"A{i}", "price": str(i)} for i in range(1, 11)]


def create(api: Api, token: str | None = None, **options: Any) -> str:
    response = api.post_json({"job": "import_products", "items": ROWS, **options}, token)
    assert response.status_code == 202, response.get_json()
    task_id: str = response.get_json()["task_id"]
    return task_id


def feed_of(api: Api, task_id: str) -> Any:
    return api.get(f"/api/tasks/{task_id}").get_json()["feed"]


def patch(api: Api, task_id: str, body: Any, token: str | None = None, **kwargs: Any) -> Any:
    if "data" not in kwargs:
        kwargs["json"] = body
    return api.http.patch(f"/api/tasks/{task_id}", headers=api.headers(token), **kwargs)


# --- creating ----------------------------------------------------------------------------


def test_a_json_body_creates_a_fed_task(api: Api) -> None:
    response = api.post_json({"job": "import_products", "items": ROWS, "parallel": 3, "priority": -1})
    assert response.status_code == 202
    body = response.get_json()
    assert body["feed"] == {"parallel": 3, "interval": 0.0, "priority": -1, "paused": False, "held": 7}
    # Only the released jobs are queued; the rest wait in the feed.
    assert len(queued(api)) == 3
    task = api.get(f"/api/tasks/{body['task_id']}").get_json()
    assert task["feed"] == body["feed"] and task["eta_seconds"] is None


def test_a_task_without_parallel_is_not_fed(api: Api) -> None:
    task_id = create(api)
    assert feed_of(api, task_id) is None
    assert len(queued(api)) == len(ROWS)


CSV = "sku,price\n" + "".join(f"{row['sku']},{row['price']}\n" for row in ROWS)


@pytest.mark.parametrize("kind", ["csv", "ndjson", "upload"])
def test_query_and_form_fields_create_a_fed_task(api: Api, kind: str) -> None:
    options = {"job": "import_products", "parallel": "2", "interval": "0.5", "priority": "7"}
    if kind == "upload":
        data = {**options, "file": (io.BytesIO(CSV.encode()), "rows.csv")}
        response = api.post("/api/tasks", data=data, content_type="multipart/form-data")
    elif kind == "csv":
        response = api.post("/api/tasks", query_string=options, data=CSV, content_type="text/csv")
    else:
        ndjson = "".join(json.dumps(row) + "\n" for row in ROWS)
        response = api.post(
            "/api/tasks", query_string=options, data=ndjson, content_type="application/x-ndjson"
        )
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["feed"] == {
        "parallel": 2,
        "interval": 0.5,
        "priority": 7,
        "paused": False,
        "held": 8,
    }


BAD_VALUES = [
    ("parallel", 0),
    ("parallel", -1),
    ("parallel", "x"),
    ("parallel", "3"),
    ("parallel", True),
    ("parallel", 1.5),
    ("parallel", None),
    ("parallel", 1_000_001),
    ("interval", -1),
    ("interval", "x"),
    ("interval", True),
    ("interval", 86_401),
    ("interval", None),
    ("priority", 1.5),
    ("priority", "x"),
    ("priority", False),
    ("priority", 2**31),
    ("priority", -(2**31) - 1),
]


def _id(value: Any) -> str:
    return f"{value}"


@pytest.mark.parametrize(("field", "value"), BAD_VALUES, ids=_id)
def test_a_bad_value_at_creation_is_refused_naming_its_field(api: Api, field: str, value: Any) -> None:
    options = {"parallel": 2, field: value}
    response = api.post_json({"job": "import_products", "items": ROWS, **options})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["details"]) == ("invalid_request", {"field": field})
    assert queued(api) == []


@pytest.mark.parametrize("field", ["interval", "priority"])
def test_interval_and_priority_need_parallel(api: Api, field: str) -> None:
    response = api.post_json({"job": "import_products", "items": ROWS, field: 1})
    assert response.status_code == 422
    assert error_of(response)["details"] == {"field": field}


@pytest.mark.parametrize(("field", "text"), [("parallel", "x"), ("interval", "soon"), ("priority", "1.5")])
def test_a_query_field_that_is_no_number_is_refused(api: Api, field: str, text: str) -> None:
    query = {"job": "import_products", "parallel": "2", field: text}
    response = api.post("/api/tasks", query_string=query, data=CSV, content_type="text/csv")
    assert response.status_code == 422
    assert error_of(response)["details"] == {"field": field}


@pytest.mark.parametrize("text", ["nan", "inf", "-1", "1e9"])
def test_a_query_interval_out_of_range_is_refused(api: Api, text: str) -> None:
    query = {"job": "import_products", "parallel": "2", "interval": text}
    response = api.post("/api/tasks", query_string=query, data=CSV, content_type="text/csv")
    assert response.status_code == 422
    assert error_of(response)["details"] == {"field": "interval"}


# --- tuning -----------------------------------------------------------------------------


def test_patch_changes_the_feed_and_answers_with_the_task(api: Api) -> None:
    task_id = create(api, parallel=2)
    response = patch(api, task_id, {"parallel": 5, "priority": 3})
    assert response.status_code == 200
    task = response.get_json()
    assert task["id"] == task_id and "eta_seconds" in task
    assert task["feed"] == {"parallel": 5, "interval": 0.0, "priority": 3, "paused": False, "held": 5}
    assert len(queued(api)) == 5
    response = patch(api, task_id, {"interval": 2.5})
    assert response.get_json()["feed"]["interval"] == 2.5
    assert feed_of(api, task_id) == {
        "parallel": 5,
        "interval": 2.5,
        "priority": 3,
        "paused": False,
        "held": 5,
    }


def test_pause_and_resume(api: Api) -> None:
    task_id = create(api, parallel=2)
    for _ in range(2):
        response = api.post(f"/api/tasks/{task_id}/pause")
        assert response.status_code == 200
        assert response.get_json()["feed"]["paused"] is True
    # Paused: a higher parallel releases nothing until the task is resumed.
    assert patch(api, task_id, {"parallel": 4}).get_json()["feed"]["held"] == 8
    response = api.post(f"/api/tasks/{task_id}/resume")
    assert response.status_code == 200
    assert response.get_json()["feed"] == {
        "parallel": 4,
        "interval": 0.0,
        "priority": 0,
        "paused": False,
        "held": 6,
    }
    assert api.post(f"/api/tasks/{task_id}/resume").status_code == 200


@pytest.mark.parametrize(("field", "value"), BAD_VALUES, ids=_id)
def test_a_bad_value_in_a_change_is_refused_naming_its_field(api: Api, field: str, value: Any) -> None:
    task_id = create(api, parallel=2)
    response = patch(api, task_id, {field: value})
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["details"]) == ("invalid_request", {"field": field})
    assert feed_of(api, task_id)["parallel"] == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"parallel": 3, "paused": True}, "paused"),
        ({"chunk_size": 3}, "chunk_size"),
        ({}, None),
        ([], None),
        ("3", None),
    ],
    ids=["unknown-field", "creation-field", "empty", "array", "string"],
)
def test_a_change_that_is_not_an_object_of_settings_is_refused(
    api: Api, body: Any, field: str | None
) -> None:
    task_id = create(api, parallel=2)
    response = patch(api, task_id, body)
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["details"]) == ("invalid_request", {"field": field})


def test_a_change_given_twice_or_not_as_json_is_refused(api: Api) -> None:
    task_id = create(api, parallel=2)
    twice = patch(api, task_id, None, data='{"parallel": 2, "parallel": 3}', content_type="application/json")
    assert twice.status_code == 422 and error_of(twice)["details"] == {"field": "parallel"}
    broken = patch(api, task_id, None, data='{"parallel": ', content_type="application/json")
    assert broken.status_code == 400 and error_of(broken)["code"] == "invalid_json"
    text = patch(api, task_id, None, data="parallel=3", content_type="application/x-www-form-urlencoded")
    assert text.status_code == 415 and error_of(text)["code"] == "unsupported_media_type"
    assert feed_of(api, task_id)["parallel"] == 2


@pytest.mark.parametrize("action", ["patch", "pause", "resume"])
def test_another_tenants_task_or_none_is_not_found(api: Api, action: str) -> None:
    task_id = create(api, api.globex, parallel=2)
    for target in (task_id, "no-such-task"):
        if action == "patch":
            response = patch(api, target, {"parallel": 3})
        else:
            response = api.post(f"/api/tasks/{target}/{action}")
        assert response.status_code == 404
        assert error_of(response)["code"] == "task_not_found"
    assert feed_of_as(api, task_id, api.globex)["parallel"] == 2


def feed_of_as(api: Api, task_id: str, token: str) -> Any:
    return api.get(f"/api/tasks/{task_id}", token).get_json()["feed"]


@pytest.mark.parametrize("action", ["patch", "pause", "resume"])
def test_an_unfed_or_ended_task_is_a_conflict(api: Api, action: str, start_tracked_worker: Any) -> None:
    def act(task_id: str) -> Any:
        if action == "patch":
            return patch(api, task_id, {"parallel": 3})
        return api.post(f"/api/tasks/{task_id}/{action}")

    unfed = create(api)
    cancelled = create(api, parallel=2)
    assert api.post(f"/api/tasks/{cancelled}/cancel").status_code == 200
    start_tracked_worker()
    finished = create(api, parallel=2)
    assert api.wait_settled(finished)["status"] == "finished"
    for task_id, code in ((unfed, "task_not_fed"), (cancelled, "task_ended"), (finished, "task_ended")):
        response = act(task_id)
        assert response.status_code == 409, response.get_json()
        assert error_of(response)["code"] == code
    assert feed_of(api, finished) == {
        "parallel": 2,
        "interval": 0.0,
        "priority": 0,
        "paused": False,
        "held": 0,
    }


def test_a_stream_snapshot_shows_the_feed(api: Api) -> None:
    task_id = create(api, parallel=2)
    assert api.post(f"/api/tasks/{task_id}/cancel").status_code == 200
    response = api.get(f"/api/tasks/{task_id}/stream")
    frames = [
        block for block in response.get_data(as_text=True).split("\n\n") if block.startswith("event: end")
    ]
    snapshot = json.loads(frames[0].split("data: ", 1)[1])
    assert snapshot["feed"] == {"parallel": 2, "interval": 0.0, "priority": 0, "paused": False, "held": 0}


def test_the_dashboard_tunes_a_feed_as_the_api_checks_it(api: Api) -> None:
    """The dashboard's tuning form: its fields are checked as PATCH checks them, and an empty
    field leaves its setting."""
    created = api.post_json({"job": "import_products", "items": ROWS, "parallel": 3, "priority": -1})
    task_id = created.get_json()["task_id"]
    operator = create_token(api.engine, "ops", operator=True).token
    login = api.http.post("/dashboard/login", data={"token": operator, "csrf_token": _csrf(api, "login")})
    assert login.status_code == 303
    # A login starts a fresh session, with a CSRF token of its own.
    csrf = _csrf(api, f"tasks/{task_id}")

    def tune(**fields: str) -> str:
        response = api.http.post(f"/dashboard/tasks/{task_id}/update", data={"csrf_token": csrf, **fields})
        assert response.status_code == 303
        return api.http.get(response.headers["Location"]).get_data(as_text=True)

    assert "feed updated" in tune(parallel="7", interval="", priority="")
    assert api.get(f"/api/tasks/{task_id}").get_json()["feed"]["parallel"] == 7
    for bad in ({"parallel": "0"}, {"parallel": "x"}, {"interval": "nan"}, {"priority": "1.5"}):
        assert "not done:" in tune(**bad), bad
    assert api.get(f"/api/tasks/{task_id}").get_json()["feed"] == {
        "parallel": 7,
        "interval": 0.0,
        "priority": -1,
        "paused": False,
        "held": 3,
    }


def _csrf(api: Api, page: str) -> str:
    found = re.search(
        r'name="csrf_token" value="([^"]+)"', api.http.get(f"/dashboard/{page}").get_data(as_text=True)
    )
    assert found is not None
    return found.group(1)
