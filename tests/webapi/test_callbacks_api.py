"""Callbacks through the HTTP API: named in the POST, refused with a 422 when they cannot run,
shown with their state in the task's GET."""

from __future__ import annotations

from typing import Any

import pytest

from asynctask import Registry
from tests.webapi.conftest import Api, MakeApi, define_jobs


def test_a_task_posted_with_callbacks_shows_them_and_calls_back_when_cancelled(
    make: MakeApi, registry: Registry
) -> None:
    if "echo" not in registry:
        # The SQL broker's apps come without the API's jobs.
        define_jobs(registry)
    api = make()
    created = api.post_json(
        {"job": "echo", "items": [1, 2], "on_complete": "echo", "on_success": "echo", "on_failure": None}
    )
    assert created.status_code == 202, created.get_json()
    task_id = created.get_json()["task_id"]
    shown = api.get(f"/api/tasks/{task_id}").get_json()["callbacks"]
    assert [(c["kind"], c["job"], c["state"], c["fired_at"]) for c in shown] == [
        ("complete", "echo", "waiting", None),
        ("success", "echo", "waiting", None),
    ]
    assert api.post(f"/api/tasks/{task_id}/cancel").status_code == 200
    # Nothing was running: the cancel ended the task, and pushed what applies to a cancelled one.
    after = {c["kind"]: c for c in api.get(f"/api/tasks/{task_id}").get_json()["callbacks"]}
    assert after["complete"]["state"] == "pushed" and after["complete"]["fired_at"] is not None
    assert after["success"]["state"] == "waiting"


def test_callbacks_given_in_a_csv_query(api: Api) -> None:
    response = api.post("/api/tasks?job=echo&on_complete=echo", data=b"a\n1\n2\n", content_type="text/csv")
    assert response.status_code == 202, response.get_json()
    shown = api.get(f"/api/tasks/{response.get_json()['task_id']}").get_json()["callbacks"]
    assert [(c["kind"], c["job"]) for c in shown] == [("complete", "echo")]


@pytest.mark.parametrize(
    ("extra", "code", "field"),
    [
        ({"on_failure": "internal"}, "unknown_job", "on_failure"),
        ({"on_complete": "nope"}, "unknown_job", "on_complete"),
        ({"on_complete": ""}, "unknown_job", "on_complete"),
        ({"on_success": 3}, "invalid_request", "on_success"),
        ({"callback_args": [1]}, "invalid_request", "callback_args"),
        ({"on_complete": "echo", "callback_args": "x"}, "invalid_request", "callback_args"),
        # echo takes one argument, the summary: one more is too many.
        ({"on_complete": "echo", "callback_args": [1]}, "invalid_request", "callback_args"),
    ],
)
def test_a_callback_that_cannot_run_is_a_422_and_writes_nothing(
    api: Api, extra: dict[str, Any], code: str, field: str
) -> None:
    response = api.post_json({"job": "echo", "items": [1], **extra})
    assert response.status_code == 422, response.get_json()
    body = response.get_json()
    assert (body["error"]["code"], body["error"]["details"]["field"]) == (code, field)
    assert api.get("/api/tasks").get_json()["items"] == []
