"""Every endpoint, error code and limit of the API, through Flask's test client, on SQLite and
PostgreSQL, with real Redis and real workers."""

from __future__ import annotations

import io
import json
import re
import threading
from dataclasses import replace
from typing import Any

import pytest
import redis
from sqlalchemy import func, select, update

from asynctask import Client, Settings
from asynctask.api import Queue
from asynctask.db.engine import writer
from asynctask.middleware import Chain
from asynctask.settings import QueueSpec
from asynctask.tokens import revoke_token
from asynctask.tracking import transitions
from asynctask.tracking.apply import apply_transitions
from asynctask.tracking.models import Event, Task
from asynctask.tracking.status import EventStatus
from tests.conftest import started_threads, wait_until
from tests.webapi.conftest import Api
from webapi.resources import EXTENSION

ROWS = [{"sku": f"A{i}", "price": str(i)} for i in range(1, 8)]
NO_WORKER = {
    "code": "no_worker",
    "message": "no live worker listens to queue 'default'; the jobs wait until one does",
}


def error_of(response: Any) -> dict[str, Any]:
    body = response.get_json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "details"}, body
    assert body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


def queued(api: Api, queue: str = "default") -> list[dict[str, Any]]:
    """The queue's waiting jobs, its shares' included (a task's jobs wait in its share of a
    fair queue), each list's next to run first."""
    rows = list(Queue(queue, settings=api.client.settings))
    return [json.loads(row.raw) for row in reversed(rows)]


def task_rows(api: Api) -> int:
    with api.engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(Task)).scalar_one())


def assert_nothing_written(api: Api) -> None:
    assert queued(api) == []
    assert task_rows(api) == 0
    with api.engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(Event)).scalar_one() == 0


# --- submitting -------------------------------------------------------------------------


def test_post_json_creates_a_task_and_its_jobs(api: Api) -> None:
    response = api.post_json({"job": "import_products", "items": ROWS, "chunk_size": 3, "meta": {"by": "me"}})
    assert response.status_code == 202
    body = response.get_json()
    task_id = body["task_id"]
    assert body == {
        "task_id": task_id,
        "job": "import_products",
        "items": 7,
        "jobs": 3,
        "chunk_size": 3,
        "status": "pending",
        "feed": None,
        "urls": {
            "self": f"/api/tasks/{task_id}",
            "events": f"/api/tasks/{task_id}/events",
            "items": f"/api/tasks/{task_id}/items?status=failed",
            "stream": f"/api/tasks/{task_id}/stream",
        },
        "warnings": [NO_WORKER],
    }
    assert response.headers["Location"] == f"/api/tasks/{task_id}"
    jobs = queued(api)
    assert [job["args"] for job in jobs] == [[ROWS[0:3]], [ROWS[3:6]], [ROWS[6:7]]]
    assert {job["task"] for job in jobs} == {task_id}
    task = api.get(f"/api/tasks/{task_id}").get_json()
    assert task["total"] == 3 and task["counts"]["enqueue"] == 3 and task["meta"] == {"by": "me"}


def test_a_task_is_created_with_a_warning_while_no_worker_listens_to_its_queue(
    api: Api, start_tracked_worker: Any
) -> None:
    first = api.post_json({"job": "echo", "items": [1, 2], "queue": "imports"})
    assert first.status_code == 202
    assert first.get_json()["warnings"] == [
        {
            "code": "no_worker",
            "message": "no live worker listens to queue 'imports'; the jobs wait until one does",
        }
    ]
    start_tracked_worker(queues=(QueueSpec("imports"),))
    second = api.post_json({"job": "echo", "items": [1, 2], "queue": "imports"})
    assert (second.status_code, second.get_json()["warnings"]) == (202, [])
    # The first task's jobs were waiting, not lost: the worker that came later runs them.
    assert api.wait_settled(first.get_json()["task_id"])["status"] == "finished"


def test_post_csv_body_streams_rows_as_objects(api: Api) -> None:
    csv_text = "sku,price\r\nA1,1\r\n\r\nA2,2.5\r\n"
    response = api.post(
        "/api/tasks?job=import_products&chunk_size=2&queue=imports",
        data=csv_text.encode(),
        content_type="text/csv",
    )
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["items"] == 2
    assert [job["args"] for job in queued(api, "imports")] == [
        [[{"sku": "A1", "price": "1"}, {"sku": "A2", "price": "2.5"}]]
    ]


def test_a_byte_order_mark_is_not_part_of_the_first_column_name(api: Api) -> None:
    """Spreadsheet programs save CSV with one; only the body's first three bytes are one."""
    response = api.post(
        "/api/tasks?job=import_products&queue=imports",
        data="\ufeffsku,price\r\n\ufeffA1,1\r\n".encode(),
        content_type="text/csv",
    )
    assert response.status_code == 202, response.get_json()
    assert [job["args"] for job in queued(api, "imports")] == [[[{"sku": "\ufeffA1", "price": "1"}]]]


def test_post_ndjson_body(api: Api) -> None:
    lines = "\n".join(json.dumps(row) for row in ROWS[:3]) + "\n\n"
    response = api.post("/api/tasks?job=import_products", data=lines, content_type="application/x-ndjson")
    assert response.status_code == 202
    assert [job["args"] for job in queued(api)] == [[[row]] for row in ROWS[:3]]


@pytest.mark.parametrize(
    ("filename", "content"),
    [
        ("rows.csv", b"sku,price\nA1,1\nA2,2\n"),
        ("rows.ndjson", b'{"sku": "A1", "price": "1"}\n{"sku": "A2", "price": "2"}\n'),
        ("rows.json", b'[{"sku": "A1", "price": "1"}, {"sku": "A2", "price": "2"}]'),
    ],
)
def test_post_multipart_upload(api: Api, filename: str, content: bytes) -> None:
    response = api.post(
        "/api/tasks",
        data={"job": "import_products", "chunk_size": "2", "file": (io.BytesIO(content), filename)},
        content_type="multipart/form-data",
    )
    assert response.status_code == 202, response.get_json()
    assert [job["args"] for job in queued(api)] == [
        [[{"sku": "A1", "price": "1"}, {"sku": "A2", "price": "2"}]]
    ]


# --- errors and limits: nothing is ever written when a request fails -------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"job": "nope", "items": [1]}, 422, "unknown_job"),
        ({"job": "internal", "items": [1]}, 422, "unknown_job"),
        ({"items": [1]}, 422, "invalid_request"),
        ({"job": "echo", "items": {"a": 1}}, 422, "invalid_request"),
        ({"job": "echo", "items": [1], "extra": True}, 422, "invalid_request"),
        ({"job": "echo", "items": [1], "chunk_size": 0}, 422, "invalid_request"),
        ({"job": "echo", "items": [1], "chunk_size": True}, 422, "invalid_request"),
        ({"job": "echo", "items": [1], "chunk_size": 11}, 422, "chunk_size_too_large"),
        ({"job": "echo", "items": [1], "queue": "no spaces"}, 422, "invalid_request"),
        ({"job": "echo", "items": [1], "meta": [1]}, 422, "invalid_request"),
        ({"job": "echo", "items": []}, 422, "no_items"),
        ({"job": "echo", "items": list(range(51))}, 413, "too_many_items"),
        ({"job": "echo", "items": [[[[[[1]]]]]]}, 422, "json_too_deep"),
        ([1, 2], 422, "invalid_request"),
    ],
)
def test_bad_json_submissions(api: Api, body: Any, status: int, code: str) -> None:
    response = api.post_json(body)
    assert response.status_code == status
    assert error_of(response)["code"] == code
    assert_nothing_written(api)


def test_limits_are_named_in_the_error(api: Api) -> None:
    assert error_of(api.post_json({"job": "echo", "items": list(range(51))}))["details"] == {
        "limit": "max_items",
        "max": 50,
    }
    assert error_of(api.post_json({"job": "echo", "items": [1], "chunk_size": 11}))["details"] == {
        "limit": "max_chunk_size",
        "max": 10,
    }
    # The body is level 1 and "items" level 2: six levels pass, seven do not.
    assert api.post_json({"job": "echo", "items": [[[[[1]]]]]}).status_code == 202
    assert error_of(api.post_json({"job": "echo", "items": [[[[[[1]]]]]]}))["details"] == {
        "limit": "max_json_depth",
        "max": 6,
    }
    big = api.post_json({"job": "echo", "items": ["x" * 20_000]})
    assert big.status_code == 413
    assert error_of(big) == {
        "code": "body_too_large",
        "message": error_of(big)["message"],
        "details": {"limit": "max_body_bytes", "max": 16 * 1024},
    }
    # Only the request within every limit enqueued anything.
    assert [job["args"] for job in queued(api)] == [[[[[[[1]]]]]]]


def test_hostile_bodies(api: Api) -> None:
    deep = b'{"job": "echo", "items": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = api.post("/api/tasks", data=deep, content_type="application/json")
    assert (response.status_code, error_of(response)["code"]) == (422, "json_too_deep")
    for data in (b"{not json", b"\xff\xfe", b""):
        response = api.post("/api/tasks", data=data, content_type="application/json")
        assert (response.status_code, error_of(response)["code"]) == (400, "invalid_json")
    response = api.post("/api/tasks", data=b"<xml/>", content_type="application/xml")
    assert (response.status_code, error_of(response)["code"]) == (415, "unsupported_media_type")
    assert_nothing_written(api)


def test_schema_validation_lists_errors_and_enqueues_nothing(api: Api) -> None:
    items = [*ROWS, {"sku": "", "price": "1"}, {"sku": "B"}, {"sku": "C", "price": "cheap"}]
    response = api.post_json({"job": "import_products", "items": items})
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "validation_failed"
    assert error["details"]["error_count"] == 3
    listed = {(e["item"], e["path"]) for e in error["details"]["errors"]}
    assert listed == {(7, "/sku"), (8, "/"), (9, "/price")}
    assert_nothing_written(api)


def test_schema_errors_of_csv_and_ndjson_name_the_line_and_the_csv_column(api: Api) -> None:
    def listed(data: bytes, content_type: str) -> list[dict[str, Any]]:
        response = api.post("/api/tasks?job=import_products", data=data, content_type=content_type)
        error = error_of(response)
        assert (response.status_code, error["code"]) == (422, "validation_failed")
        errors: list[dict[str, Any]] = error["details"]["errors"]
        return errors

    # No price column; a blank line, and a quoted name over two lines: rows start on lines 2, 4, 6.
    csv_body = b'sku,name\nA1,x\n\n"B2","two\nlines"\nC3,z\n'
    assert listed(csv_body, "text/csv") == [
        {
            "item": item,
            "line": line,
            "column": "price",
            "path": "/",
            "message": '"price" is a required property',
        }
        for item, line in [(0, 2), (1, 4), (2, 6)]
    ]
    [wrong] = listed(b"sku,price\nA1,1\nA2,cheap\n", "text/csv")
    assert (wrong["item"], wrong["line"], wrong["column"], wrong["path"]) == (1, 3, "price", "/price")
    ndjson_body = b'{"sku": "A1", "price": "1"}\n\n{"sku": "A2"}\n'
    [wrong] = listed(ndjson_body, "application/x-ndjson")
    assert (wrong["item"], wrong["line"], wrong["path"]) == (1, 3, "/") and "column" not in wrong
    assert_nothing_written(api)


def test_bad_streamed_input_rolls_the_task_back(api: Api) -> None:
    cases = [
        ("text/csv", b"sku,price\nA1,1\nA2\n", 400, "invalid_csv", {"line": 3}),
        ("text/csv", b"sku,sku\nA1,1\n", 400, "invalid_csv", {"line": 1}),
        ("text/csv", b"sku,price\nA1,\xff\n", 400, "invalid_csv", None),
        ("text/csv", b"sku,price\n", 422, "no_items", None),
        ("text/csv", b"sku,price\n" + b"A,1\n" * 51, 413, "too_many_items", None),
        ("text/csv", b"sku,price\nA1,1\nA2,x\n", 422, "validation_failed", None),
        ("application/x-ndjson", b'{"sku": "A", "price": "1"}\n{oops\n', 400, "invalid_json", {"line": 2}),
    ]
    for content_type, data, status, code, details in cases:
        response = api.post("/api/tasks?job=import_products", data=data, content_type=content_type)
        assert response.status_code == status, (data, response.get_json())
        error = error_of(response)
        assert error["code"] == code
        if details is not None:
            assert error["details"] == details
        assert_nothing_written(api)


@pytest.mark.parametrize(
    ("data", "line"),
    [
        # A quote never closed: the csv module reads the rest of the file into its field.
        (b'sku,price\nA1,1\n"A2,2\nA3,3\n', 3),
        (b'sku,price\nA1,1\nA2,"2\nA3,3\n', 3),
        # Not UTF-8: found on its line, not in the first chunk decoded.
        (b"sku,price\nA1,1\nA2,\xff\nA3,3\n", 3),
        (b'sku,price\r\nA1,"one\r\ntwo"\r\nA2,\xff\r\n', 4),
        (b"sku,price\rA1,1\rA2,\xc3(\r", 3),
        # A record over two lines with a field too many: the line it starts on.
        (b'sku,price\nA1,"one\ntwo",3\nA2,2\n', 2),
    ],
)
def test_a_csv_error_names_the_line_where_it_starts(api: Api, data: bytes, line: int) -> None:
    response = api.post("/api/tasks?job=import_products", data=data, content_type="text/csv")
    assert response.status_code == 400, response.get_json()
    error = error_of(response)
    assert (error["code"], error["details"]) == ("invalid_csv", {"line": line})
    assert re.match(rf"line {line}\b", error["message"]), error["message"]
    assert_nothing_written(api)


def test_query_options_of_uploads_are_checked(api: Api) -> None:
    for query, code in [
        ("job=import_products&chunk_size=x", "invalid_request"),
        ("job=import_products&meta=[1]", "invalid_request"),
        ("job=import_products&meta={", "invalid_request"),
        ("job=import_products&colour=red", "invalid_request"),
        ("", "invalid_request"),
    ]:
        response = api.post(f"/api/tasks?{query}", data=b"sku,price\nA,1\n", content_type="text/csv")
        assert (response.status_code, error_of(response)["code"]) == (422, code), query
    response = api.post(
        "/api/tasks",
        data={"job": "import_products", "file": (io.BytesIO(b"x"), "rows.xlsx")},
        content_type="multipart/form-data",
    )
    assert (response.status_code, error_of(response)["code"]) == (415, "unsupported_media_type")
    response = api.post("/api/tasks", data={"job": "import_products"}, content_type="multipart/form-data")
    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_request")
    assert_nothing_written(api)


def test_redis_down_while_creating_is_503_and_leaves_no_jobs(make_api: Any, redis_settings: Settings) -> None:
    api: Api = make_api()
    dead = Client(
        Settings(**{**redis_settings.__dict__, "redis_url": "redis://127.0.0.1:1/0"}),
        registry=api.client.registry,
        middleware=Chain(),
    )
    api.app.extensions["asynctask"].tracking.client = dead
    response = api.post_json({"job": "echo", "items": [1, 2]})
    assert (response.status_code, error_of(response)["code"]) == (503, "unavailable")
    assert queued(api) == []
    with api.engine.connect() as connection:
        assert connection.execute(select(Task.state)).scalars().all() == ["aborted"]


# --- auth and tenants ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer nope"},
    ],
)
def test_unauthorized(api: Api, headers: dict[str, str]) -> None:
    for method, url in [
        ("post", "/api/tasks"),
        ("get", "/api/tasks"),
        ("get", "/api/tasks/x"),
        ("get", "/api/tasks/x/events"),
        ("get", "/api/tasks/x/stream"),
        ("post", "/api/tasks/x/cancel"),
        ("post", "/api/tasks/x/retry"),
        ("get", "/api/jobs"),
    ]:
        response = getattr(api.http, method)(url, headers=headers)
        assert response.status_code == 401, url
        assert error_of(response)["code"] == "unauthorized"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_token_stops_working(api: Api) -> None:
    from asynctask.tokens import create_token

    created = create_token(api.engine, "acme", "laptop")
    assert api.get("/api/jobs", created.token).status_code == 200
    assert revoke_token(api.engine, created.id)
    assert api.get("/api/jobs", created.token).status_code == 401


def test_tenants_see_only_their_own_tasks(api: Api) -> None:
    mine = api.post_json({"job": "echo", "items": [1, 2]}).get_json()["task_id"]
    theirs = api.post_json({"job": "echo", "items": [3]}, token=api.globex).get_json()["task_id"]
    for url in (f"/api/tasks/{theirs}", f"/api/tasks/{theirs}/events", f"/api/tasks/{theirs}/stream"):
        response = api.get(url)
        assert (response.status_code, error_of(response)["code"]) == (404, "task_not_found"), url
    for url in (f"/api/tasks/{theirs}/cancel", f"/api/tasks/{theirs}/retry"):
        response = api.post(url)
        assert (response.status_code, error_of(response)["code"]) == (404, "task_not_found"), url
    assert [t["id"] for t in api.get("/api/tasks").get_json()["items"]] == [mine]
    assert [t["id"] for t in api.get("/api/tasks", api.globex).get_json()["items"]] == [theirs]
    assert api.get(f"/api/tasks/{theirs}", api.globex).status_code == 200
    # Globex's task was not cancelled by Acme's attempt.
    assert api.get(f"/api/tasks/{theirs}", api.globex).get_json()["status"] == "pending"


def test_auth_off_for_development(make_api: Any) -> None:
    api: Api = make_api(auth=False)
    response = api.http.post("/api/tasks", json={"job": "echo", "items": [1]})
    assert response.status_code == 202
    task_id = response.get_json()["task_id"]
    assert api.http.get(f"/api/tasks/{task_id}").status_code == 200
    assert [t["id"] for t in api.http.get("/api/tasks").get_json()["items"]] == [task_id]


# --- reading ------------------------------------------------------------------------------------


def test_progress_events_and_errors_of_a_run_task(api: Api, start_tracked_worker: Any) -> None:
    rows = [*ROWS, {"sku": "NEG", "price": "-1"}, {"sku": "BUG", "price": "1"}]
    task_id = api.post_json({"job": "import_products", "items": rows}).get_json()["task_id"]
    start_tracked_worker(max_retries=0)
    task = api.wait_settled(task_id)
    assert task["status"] == "finished_with_errors"
    assert task["counts"] == {
        "enqueue": 0,
        "working": 0,
        "finish": 7,
        "failed": 1,
        "error": 1,
        "cancelled": 0,
        "stopped": 0,
        "lost": 0,
    }
    assert (task["done"], task["total"], task["progress"], task["eta_seconds"]) == (9, 9, 1.0, None)
    assert task["started_at"] and task["finished_at"]
    errors = {e["status"]: e for e in task["errors"]}
    assert errors["failed"]["error"] == "price must be positive for SKU NEG"
    assert errors["failed"]["params"] == [[{"sku": "NEG", "price": "-1"}]]
    assert errors["error"]["error"] == "RuntimeError: bug in the importer"
    assert [m["status"] for m in errors["failed"]["messages"]] == ["working", "failed"]
    assert api.get(f"/api/tasks/{task_id}?errors=0").get_json()["errors"] == []
    assert len(api.get(f"/api/tasks/{task_id}?errors=1").get_json()["errors"]) == 1

    seen: list[dict[str, Any]] = []
    url = f"/api/tasks/{task_id}/events?limit=4"
    while url:
        page = api.get(url).get_json()
        seen.extend(page["items"])
        url = f"/api/tasks/{task_id}/events?limit=4&after={page['next']}" if page["next"] else ""
    assert [e["params"][0][0]["sku"] for e in seen] == [r["sku"] for r in rows]
    failed = api.get(f"/api/tasks/{task_id}/events?status=failed").get_json()
    assert [e["status"] for e in failed["items"]] == ["failed"] and failed["next"] is None


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("events?limit=0", "invalid_request"),
        ("events?limit=1001", "invalid_request"),
        ("events?limit=x", "invalid_request"),
        ("events?status=done", "invalid_request"),
        ("events?after=-1", "invalid_cursor"),
        ("events?after=x", "invalid_cursor"),
        ("?errors=101", "invalid_request"),
        ("?errors=x", "invalid_request"),
    ],
)
def test_bad_read_parameters(api: Api, query: str, code: str) -> None:
    task_id = api.post_json({"job": "echo", "items": [1]}).get_json()["task_id"]
    sep = "/" if query.startswith("events") else ""
    response = api.get(f"/api/tasks/{task_id}{sep}{query}")
    assert (response.status_code, error_of(response)["code"]) == (422, code)


def test_events_of_one_status_include_stopped_ones(api: Api) -> None:
    task_id = api.post_json({"job": "echo", "items": [1, 2, 3]}).get_json()["task_id"]
    jids = [e["job_id"] for e in api.get(f"/api/tasks/{task_id}/events").get_json()["items"]]
    stop = [
        transitions.status(jids[1], EventStatus.WORKING, "started"),
        transitions.status(jids[1], EventStatus.STOPPED, "stopped at 4"),
    ]
    with writer(api.engine).begin() as connection:
        apply_transitions(connection, [replace(t, seq=n) for n, t in enumerate(stop, 1)])
    response = api.get(f"/api/tasks/{task_id}/events?status=stopped")
    assert response.status_code == 200
    page = response.get_json()
    assert [(e["job_id"], e["status"]) for e in page["items"]] == [(jids[1], "stopped")]
    assert page["items"][0]["messages"][-1]["text"] == "stopped at 4" and page["next"] is None
    task = api.get(f"/api/tasks/{task_id}").get_json()
    assert (task["counts"]["stopped"], task["counts"]["enqueue"], task["status"]) == (1, 2, "running")
    # An unknown status is still refused, naming the statuses there are.
    response = api.get(f"/api/tasks/{task_id}/events?status=paused")
    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_request")
    assert "stopped" in error_of(response)["message"]


def test_list_tasks_newest_first_in_pages(api: Api) -> None:
    ids = [api.post_json({"job": "echo", "items": [i]}).get_json()["task_id"] for i in range(5)]
    first = api.get("/api/tasks?limit=3").get_json()
    assert [t["id"] for t in first["items"]] == ids[::-1][:3]
    second = api.get(f"/api/tasks?limit=3&before={first['next']}").get_json()
    assert [t["id"] for t in second["items"]] == ids[::-1][3:] and second["next"] is None
    response = api.get("/api/tasks?before=garbage")
    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_cursor")
    response = api.get("/api/tasks?limit=0")
    assert (response.status_code, error_of(response)["code"]) == (422, "invalid_request")


def test_unknown_task_route_and_method(api: Api) -> None:
    response = api.get("/api/tasks/unknown")
    assert (response.status_code, error_of(response)["code"]) == (404, "task_not_found")
    response = api.get("/api/nowhere")
    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")
    response = api.http.delete("/api/tasks", headers=api.headers())
    assert (response.status_code, error_of(response)["code"]) == (405, "method_not_allowed")
    assert "POST" in response.headers["Allow"]


def test_jobs_lists_only_submittable_jobs(api: Api) -> None:
    jobs = api.get("/api/jobs").get_json()["jobs"]
    assert [j["name"] for j in jobs] == ["echo", "import_products"]
    products = jobs[1]
    assert products["description"] == "Create products from rows of a sheet."
    assert products["schema"]["required"] == ["sku", "price"]
    assert products["queue"] == "default"


# --- cancel and retry ------------------------------------------------------------------------


def test_cancel_a_waiting_task(api: Api) -> None:
    task_id = api.post_json({"job": "echo", "items": [1, 2, 3]}).get_json()["task_id"]
    response = api.post(f"/api/tasks/{task_id}/cancel")
    assert response.status_code == 200
    task = response.get_json()
    assert task["status"] == "cancelled" and task["counts"]["cancelled"] == 3 and task["cancelled_at"]
    assert api.post(f"/api/tasks/{task_id}/cancel").status_code == 200
    response = api.post(f"/api/tasks/{task_id}/retry")
    assert (response.status_code, error_of(response)["code"]) == (409, "task_not_retryable")


def test_retry_failed_jobs_and_refuse_to_cancel_a_finished_task(api: Api, start_tracked_worker: Any) -> None:
    rows = [{"sku": "A", "price": "1"}, {"sku": "NEG", "price": "-5"}]
    task_id = api.post_json({"job": "import_products", "items": rows}).get_json()["task_id"]
    worker = start_tracked_worker()
    assert api.wait_settled(task_id)["counts"]["failed"] == 1
    response = api.post(f"/api/tasks/{task_id}/cancel")
    assert (response.status_code, error_of(response)["code"]) == (409, "task_not_cancellable")
    # No worker while retrying: with one, the retried job may have run again before the answer.
    worker.stop()
    wait_until(worker._stopped.is_set, 30)
    response = api.post(f"/api/tasks/{task_id}/retry")
    assert response.status_code == 202
    assert response.get_json()["retried"] == 1
    # The answer already shows the retried job waiting, so a poll or stream opened right
    # after it does not see the task as finished.
    retried = response.get_json()["task"]
    assert (retried["id"], retried["status"], retried["finished_at"]) == (task_id, "running", None)
    assert (retried["counts"]["failed"], retried["counts"]["enqueue"]) == (0, 1)
    start_tracked_worker()
    task = api.wait_settled(task_id)
    assert task["counts"]["failed"] == 1 and task["counts"]["finish"] == 1


# --- stream -----------------------------------------------------------------------------------


def read_events(response: Any) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    text = "".join(chunk.decode() for chunk in response.response)
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_stream_sends_snapshots_until_done(api: Api, start_tracked_worker: Any) -> None:
    rows = [{"sku": f"S{i}", "price": "1"} for i in range(20)]
    task_id = api.post_json({"job": "import_products", "items": rows}).get_json()["task_id"]
    response = api.http.get(f"/api/tasks/{task_id}/stream", headers=api.headers(), buffered=False)
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    start_tracked_worker()
    events = read_events(response)
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "end" and set(kinds[:-1]) <= {"progress"} and kinds.count("end") == 1
    assert events[0][1]["status"] == "pending"
    assert events[-1][1]["status"] == "finished" and events[-1][1]["progress"] == 1.0
    done = [snapshot["done"] for _, snapshot in events]
    assert done == sorted(done)


def test_stream_of_a_finished_task_ends_at_once(api: Api) -> None:
    task_id = api.post_json({"job": "echo", "items": [1]}).get_json()["task_id"]
    api.post(f"/api/tasks/{task_id}/cancel")
    response = api.http.get(f"/api/tasks/{task_id}/stream", headers=api.headers(), buffered=False)
    assert [kind for kind, _ in read_events(response)] == ["end"]


def test_a_closed_stream_reader_stops_and_keeps_no_connection(api: Api) -> None:
    """The reader of a stream still open is stopped by ``close``, and no connection of its engine
    stays checked out: one disposed with the engine would be left open."""
    task_id = api.post_json({"job": "echo", "items": [1]}).get_json()["task_id"]
    before = set(threading.enumerate())
    response = api.http.get(f"/api/tasks/{task_id}/stream", headers=api.headers(), buffered=False)
    next(iter(response.response))
    [reader] = [t for t in threading.enumerate() if t not in before]
    api.app.extensions[EXTENSION].watcher.close()
    assert not reader.is_alive()
    assert api.engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    response.close()


# --- health, CORS, page -----------------------------------------------------------------------


def test_health_and_readiness(api: Api) -> None:
    assert api.http.get("/healthz").get_json() == {"status": "ok"}
    ready = api.http.get("/readyz")
    assert ready.status_code == 200
    assert ready.get_json() == {"status": "ready", "checks": {"broker": "ok", "database": "ok"}}


def test_not_ready_when_redis_is_down(make_api: Any, redis_settings: Settings) -> None:
    api: Api = make_api()
    dead = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    api.app.extensions["asynctask"].client.broker.redis = dead
    response = api.http.get("/readyz")
    assert (response.status_code, error_of(response)["code"]) == (503, "unavailable")
    checks = error_of(response)["details"]["checks"]
    assert checks["database"] == "ok" and checks["broker"].startswith("error")


def test_cors(make_api: Any) -> None:
    api: Api = make_api(cors_origins=("https://app.example",))
    allowed = api.http.get("/api/jobs", headers={**api.headers(), "Origin": "https://app.example"})
    assert allowed.headers["Access-Control-Allow-Origin"] == "https://app.example"
    other = api.http.get("/api/jobs", headers={**api.headers(), "Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other.headers
    preflight = api.http.options(
        "/api/tasks",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 200
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]


def test_example_page_is_served(api: Api) -> None:
    with api.http.get("/") as page:
        assert page.status_code == 200 and page.mimetype == "text/html"
    with api.http.get("/static/app.js") as script:
        assert b"/api/tasks" in script.data


def test_first_errors_are_reused_only_while_the_task_is_unchanged(make_api: Any) -> None:
    from asynctask.tracking.cache import FirstErrorsCache
    from asynctask.tracking.queries import get_task

    api: Api = make_api()
    task_id = api.post_json({"job": "echo", "items": [1, 2, 3]}).get_json()["task_id"]
    cache = FirstErrorsCache(ttl=60)
    with api.engine.begin() as connection:
        connection.execute(
            update(Event)
            .where(Event.task_id == task_id, Event.id == min_event(api))
            .values(status="failed", error="first")
        )
        connection.execute(update(Task).values(count_failed=1, count_enqueue=2))
    with api.engine.connect() as connection:
        assert [e.error for e in get_task(connection, task_id, cache=cache).errors] == ["first"]
        # A change the counts do not show is served from the cache until the entry expires...
        connection.execute(update(Event).where(Event.task_id == task_id).values(error="changed"))
        assert [e.error for e in get_task(connection, task_id, cache=cache).errors] == ["first"]
        cache.ttl = 0.0
        assert [e.error for e in get_task(connection, task_id, cache=cache).errors] == ["changed"]
        cache.ttl = 60
        # ...and a new failure shows at once.
        connection.execute(
            update(Event)
            .where(Event.task_id == task_id, Event.status == "enqueue")
            .values(status="error", error="second")
        )
        connection.execute(update(Task).values(count_error=2, count_enqueue=0))
        assert [e.error for e in get_task(connection, task_id, cache=cache).errors] == [
            "changed",
            "second",
            "second",
        ]
        connection.commit()


def min_event(api: Api) -> int:
    with api.engine.connect() as connection:
        return int(connection.execute(select(func.min(Event.id))).scalar_one())


def test_a_bug_is_a_500_with_the_same_error_body_and_is_logged(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(job: Any, queue: str, final: Any) -> Any:
        raise RuntimeError("a client middleware with a bug")

    api.client.middleware.add(broken)
    with caplog.at_level("ERROR", logger="asynctask.api"):
        response = api.post_json({"job": "echo", "items": [1]})
    assert (response.status_code, error_of(response)["code"]) == (500, "internal_error")
    assert "a client middleware with a bug" not in response.get_data(as_text=True)
    assert any("a client middleware with a bug" in r.exc_text for r in caplog.records if r.exc_text)
    assert_nothing_written(api)


@pytest.mark.alone
def test_many_streams_of_one_task_share_one_reader(make_api: Any, start_tracked_worker: Any) -> None:
    import threading
    import time

    from sqlalchemy import event

    api: Api = make_api(max_streams=20, max_tenant_streams=20)
    rows = [{"sku": f"S{i}", "price": "1"} for i in range(40)]
    task_id = api.post_json({"job": "import_products", "items": rows}).get_json()["task_id"]
    reads: list[float] = []

    def count(*_args: Any) -> None:
        if threading.current_thread().name == "asynctask-api-watch":
            reads.append(time.monotonic())

    event.listen(api.engine, "before_cursor_execute", count)
    ends: list[str] = []

    def follow() -> None:
        response = api.http.get(f"/api/tasks/{task_id}/stream", headers=api.headers(), buffered=False)
        kinds = [kind for kind, _ in read_events(response)]
        ends.append(kinds[-1])

    streams = started_threads(follow, 20)
    started = time.monotonic()
    start_tracked_worker()
    for thread in streams:
        thread.join(60)
    elapsed = time.monotonic() - started
    event.remove(api.engine, "before_cursor_execute", count)
    assert ends == ["end"] * 20
    # One reader polls every 0.05 s (this app's stream_interval), at most 3 statements a task,
    # whether 1 or 20 clients watch: 20 readers would make about 20 times as many.
    assert 0 < len(reads) <= 3 * (elapsed / 0.05 + 2)
