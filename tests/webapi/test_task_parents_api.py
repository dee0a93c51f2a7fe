"""Tasks that wait for tasks through the HTTP API: ``after`` and ``run_if`` in the POST, refused
with a 422 when a parent is unknown, shown with parents, children and hold in the GET."""

from __future__ import annotations

from typing import Any

import pytest

from asynctask import Registry
from tests.webapi.conftest import Api, MakeApi, define_jobs


def test_a_task_posted_after_another_waits_and_both_show_the_link(make: MakeApi, registry: Registry) -> None:
    if "echo" not in registry:
        # The SQL broker's apps come without the API's jobs.
        define_jobs(registry)
    api = make()
    parent = api.post_json({"job": "echo", "items": [1, 2]}).get_json()["task_id"]
    created = api.post_json({"job": "echo", "items": [3], "after": [parent], "run_if": "complete"})
    assert created.status_code == 202, created.get_json()
    child = created.get_json()["task_id"]
    shown = api.get(f"/api/tasks/{child}").get_json()
    assert (shown["status"], shown["hold"], shown["run_if"], shown["cancel_reason"]) == (
        "pending",
        "waiting",
        "complete",
        None,
    )
    assert shown["parents"] == [{"task_id": parent, "job": "echo", "ended_at": None, "succeeded": None}]
    first = api.get(f"/api/tasks/{child}/events").get_json()["items"][0]
    assert first["messages"][0]["text"] == f"waiting for task {parent}"
    # Its feed resumes when its parents have ended, not before.
    refused = api.post(f"/api/tasks/{child}/resume")
    assert refused.status_code == 409 and refused.get_json()["error"]["code"] == "task_waiting"
    of_parent = api.get(f"/api/tasks/{parent}").get_json()
    assert of_parent["children"] == [{"task_id": child, "job": "echo", "hold": "waiting"}]
    assert of_parent["children_count"] == 1 and of_parent["hold"] is None
    # Cancelled with nothing running, the parent ends: the child (run_if complete) is released.
    assert api.post(f"/api/tasks/{parent}/cancel").status_code == 200
    shown = api.get(f"/api/tasks/{child}").get_json()
    assert shown["hold"] == "released" and shown["parents"][0]["succeeded"] is False


def test_an_unknown_parent_is_a_422_and_writes_nothing(api: Api) -> None:
    response = api.post_json({"job": "echo", "items": [1], "after": ["0" * 32]})
    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert (error["code"], error["details"]) == ("unknown_parent", {"field": "after", "task_id": "0" * 32})
    assert api.get("/api/tasks").get_json()["items"] == []


def test_parents_given_in_a_csv_query(api: Api) -> None:
    parent = api.post_json({"job": "echo", "items": [1]}).get_json()["task_id"]
    response = api.post(f'/api/tasks?job=echo&after=["{parent}"]', data=b"a\n1\n", content_type="text/csv")
    assert response.status_code == 202, response.get_json()
    shown = api.get(f"/api/tasks/{response.get_json()['task_id']}").get_json()
    assert [p["task_id"] for p in shown["parents"]] == [parent]


@pytest.mark.parametrize(
    "extra",
    [
        {"after": []},
        {"after": "abc"},
        {"after": [3]},
        {"after": [""]},
        {"after": ["a" * 33]},
        {"after": ["a"] * 101},
        {"run_if": "success"},
        {"after": ["a"], "run_if": "always"},
    ],
)
def test_a_malformed_after_or_run_if_is_a_422(api: Api, extra: dict[str, Any]) -> None:
    response = api.post_json({"job": "echo", "items": [1], **extra})
    assert response.status_code == 422, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == "invalid_request" and error["details"]["field"] in extra
