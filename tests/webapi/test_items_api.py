"""Items run one by one over HTTP: the task's item counts, ``/items?status=failed`` page by page
(the caller's tasks only), and the dashboard's list of a task's failed items."""

from __future__ import annotations

import re
from typing import Any

import pytest

import asynctask
from asynctask import JobFailed, Registry
from asynctask.tokens import create_token
from tests.webapi.conftest import Api

#: As many items as the test API takes (``max_items``), in chunks as large as it allows.
ROWS = [{"sku": f"S{n:03d}", "price": "-1" if n % 10 == 7 else "2"} for n in range(50)]
CHUNK = 10
BAD = [row["sku"] for row in ROWS if row["price"] == "-1"]


def define_sign_up(registry: Registry) -> None:
    def one(row: dict[str, str]) -> None:
        if float(row["price"]) < 0:
            raise JobFailed(f"price must be positive for SKU {row['sku']}")

    @asynctask.job(api=True, registry=registry)
    def sign_up(rows: list[dict[str, str]]) -> None:
        """Sign up products one by one."""
        asynctask.each(rows, one)


def test_failed_items_are_counted_and_listed_page_by_page(
    api: Api, registry: Registry, start_tracked_worker: Any
) -> None:
    define_sign_up(registry)
    created = api.post_json({"job": "sign_up", "items": ROWS, "chunk_size": CHUNK}).get_json()
    task_id = created["task_id"]
    assert created["urls"]["items"] == f"/api/tasks/{task_id}/items?status=failed"
    fresh = api.get(f"/api/tasks/{task_id}").get_json()
    assert fresh["items"] == {"total": 50, "done": 0, "failed": 0}
    assert api.get(f"/api/tasks/{task_id}/items").get_json() == {"items": [], "next": None}

    start_tracked_worker()
    task = api.wait_settled(task_id)
    assert task["status"] == "finished_with_errors"
    assert task["counts"]["finish"] == 5 and task["counts"]["failed"] == 0
    assert task["items"] == {"total": 50, "done": 50 - len(BAD), "failed": len(BAD)}
    assert task["progress"] == 1.0

    listed: list[dict[str, Any]] = []
    url = f"/api/tasks/{task_id}/items?status=failed&limit=3"
    while url:
        page = api.get(url).get_json()
        listed += page["items"]
        url = f"/api/tasks/{task_id}/items?status=failed&limit=3&after={page['next']}" if page["next"] else ""
    assert [i["item"]["sku"] for i in listed] == BAD
    assert [i["message"] for i in listed] == [f"price must be positive for SKU {sku}" for sku in BAD]
    assert [i["position"] for i in listed] == [int(sku[1:]) % CHUNK for sku in BAD]
    events = api.get(f"/api/tasks/{task_id}/events?limit=100").get_json()["items"]
    assert sum(e["items_run"]["failed"] for e in events) == len(BAD)
    assert all(e["items_run"]["done"] + e["items_run"]["failed"] == CHUNK for e in events)

    # Another tenant's task is as absent as none; the list's parameters are checked.
    other = api.get(f"/api/tasks/{task_id}/items", token=api.globex)
    assert (other.status_code, other.get_json()["error"]["code"]) == (404, "task_not_found")
    for query, code in (
        ("status=done", "invalid_request"),
        ("after=x", "invalid_cursor"),
        ("after=1", "invalid_cursor"),
        ("after=1-x", "invalid_cursor"),
        ("after=1-2147483648", "invalid_cursor"),
        ("limit=0", "invalid_request"),
    ):
        response = api.get(f"/api/tasks/{task_id}/items?{query}")
        assert (response.status_code, response.get_json()["error"]["code"]) == (422, code), query

    operator = create_token(api.engine, "ops", operator=True).token
    login = api.http.get("/dashboard/login").get_data(as_text=True)
    found = re.search(r'name="csrf_token" value="([^"]+)"', login)
    assert found is not None
    api.http.post("/dashboard/login", data={"token": operator, "csrf_token": found.group(1)})
    board = api.http.get(f"/dashboard/tasks/{task_id}").get_data(as_text=True)
    assert f"50 / 50 run one by one · {50 - len(BAD)} done · {len(BAD)} failed" in board
    for sku in BAD:
        assert f"price must be positive for SKU {sku}" in board


@pytest.mark.parametrize("limit", [1, 1000])
def test_a_task_without_items_run_one_by_one_counts_jobs(api: Api, limit: int) -> None:
    task_id = api.post_json({"job": "echo", "items": [1, 2, 3]}).get_json()["task_id"]
    task = api.get(f"/api/tasks/{task_id}").get_json()
    assert task["items"] == {"total": 3, "done": 0, "failed": 0}
    assert api.get(f"/api/tasks/{task_id}/items?limit={limit}").get_json() == {"items": [], "next": None}
