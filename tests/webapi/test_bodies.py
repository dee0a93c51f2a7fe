"""The API's bodies as the document describes them from their typed models: real answers of
every JSON route, checked against the schema of their operation and status. The models are
closed and require their keys, so a serializer that writes a key its model lacks, or leaves one
out, fails here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema_rs

import asynctask
from asynctask import Registry
from asynctask.periodic import Schedule
from asynctask.tracking.status import EventStatus
from tests.webapi.conftest import Api, MakeApi
from tests.webapi.test_items_api import define_sign_up
from tests.webapi.test_periodic import T0, declare
from webapi.bodies import TaskCounts
from webapi.openapi import document

ROWS = [{"sku": "A1", "price": "1"}, {"sku": "NEG", "price": "-1"}, {"sku": "BUG", "price": "1"}]
#: Items that fail one by one (``sign_up``): two, so that a page of one has a next.
NEGATIVE = [{"sku": "N1", "price": "-1"}, {"sku": "N2", "price": "-2"}]


class Checked:
    """Requests whose answers are checked against the document."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.doc = document()
        self.seen: set[str] = set()

    def __call__(self, method: str, url: str, path: str, status: int, **kwargs: Any) -> Any:
        response = self.api.http.open(url, method=method, headers=self.api.headers(), **kwargs)
        assert response.status_code == status, (method, url, response.get_data(as_text=True))
        operation = self.doc["paths"][path][method.lower()]
        answer = operation["responses"][str(status)]
        if "$ref" in answer:
            answer = self.doc["components"]["responses"][answer["$ref"].rsplit("/", 1)[1]]
        schema = answer["content"]["application/json"]["schema"]
        self.validate(schema, response.get_json())
        self.seen.add(json.dumps(schema))
        return response.get_json()

    def validate(self, schema: dict[str, Any], body: Any) -> None:
        validator = jsonschema_rs.validator_for(
            {**schema, "components": self.doc["components"]}, validate_formats=True
        )
        errors = [f"{error.instance_path}: {error.message}" for error in validator.iter_errors(body)]
        assert not errors, (schema, errors, body)


def test_task_counts_name_every_event_status() -> None:
    assert list(TaskCounts.__annotations__) == [status.value for status in EventStatus]


def test_every_json_answer_matches_its_model(
    make_api: MakeApi, registry: Registry, start_tracked_worker: Any
) -> None:
    api = make_api(operator_tenants=("acme",))
    define_sign_up(registry)

    @asynctask.job(api=True, registry=registry)
    def sweep(items: list[Any], cursor: int | None = None) -> Iterator[int]:
        """Go through the items, resumable from the last one done."""
        yield from range(0 if cursor is None else cursor + 1, len(items))

    check = Checked(api)
    check("GET", "/healthz", "/healthz", 200)
    check("GET", "/readyz", "/readyz", 200)
    check("GET", "/api/jobs", "/api/jobs", 200)
    created = check(
        "POST",
        "/api/tasks",
        "/api/tasks",
        202,
        json={"job": "import_products", "items": ROWS, "parallel": 2, "meta": {"batch": 1}},
    )
    task_id = created["task_id"]
    assert created["feed"] is not None and created["warnings"]
    items_task = check("POST", "/api/tasks", "/api/tasks", 202, json={"job": "sign_up", "items": NEGATIVE})
    worker = start_tracked_worker(max_retries=0)
    api.wait_settled(task_id)
    api.wait_settled(items_task["task_id"])
    worker.stop()

    task = check("GET", f"/api/tasks/{task_id}", "/api/tasks/{task_id}", 200)
    assert task["errors"] and task["errors"][0]["messages"]
    assert check("GET", "/api/tasks", "/api/tasks", 200)["items"]
    assert check("GET", "/api/tasks?limit=1", "/api/tasks", 200)["next"]
    events = check("GET", f"/api/tasks/{task_id}/events?limit=1", "/api/tasks/{task_id}/events", 200)
    assert events["next"]
    failed_items = f"/api/tasks/{items_task['task_id']}/items?limit=1"
    assert check("GET", failed_items, "/api/tasks/{task_id}/items", 200)["next"]
    stream = api.get(f"/api/tasks/{task_id}/stream")
    assert stream.status_code == 200
    blocks = stream.get_data(as_text=True).split("\n\n")
    (end,) = [block for block in blocks if block.startswith("event: end")]
    snapshot = json.loads(end.removeprefix("event: end\ndata: "))
    assert snapshot["errors"]
    check.validate({"$ref": "#/components/schemas/TaskSnapshot"}, snapshot)

    check("PATCH", f"/api/tasks/{task_id}", "/api/tasks/{task_id}", 409, json={"parallel": 3})
    check("POST", f"/api/tasks/{task_id}/retry", "/api/tasks/{task_id}/retry", 202)
    check("POST", f"/api/tasks/{task_id}/cancel", "/api/tasks/{task_id}/cancel", 200)

    keyed = {"job": "sweep", "items": ROWS, "concurrency_key": "{sku}"}
    waiting = check("POST", "/api/tasks", "/api/tasks", 202, json=keyed)
    assert check("GET", "/api/keys", "/api/keys", 200)["items"]
    events = check("GET", f"/api/tasks/{waiting['task_id']}/events", "/api/tasks/{task_id}/events", 200)
    job_id = events["items"][0]["job_id"]
    check("POST", f"/api/jobs/{job_id}/stop", "/api/jobs/{jid}/stop", 200)
    check("POST", f"/api/jobs/{job_id}/resume", "/api/jobs/{jid}/resume", 200)
    # One schedule with a job enqueued (every field set), one without (its fields null).
    declare(
        api.client.settings,
        Schedule("every-second", "beat", "* * * * * *"),
        Schedule("nightly", "report", "0 3 * * *"),
        take_at=T0 + 1.25,
    )
    assert len(check("GET", "/api/periodic", "/api/periodic", 200)["schedules"]) == 2
    assert check("GET", "/api/queues", "/api/queues", 200)["queues"]
    check("POST", "/api/queues/default/pause", "/api/queues/{name}/pause", 200)
    check("POST", "/api/queues/default/resume", "/api/queues/{name}/resume", 200)
    check("POST", "/api/queues/default/clear", "/api/queues/{name}/clear", 200)

    check("GET", "/api/tasks/nothing", "/api/tasks/{task_id}", 404)
    check("GET", "/api/tasks?limit=0", "/api/tasks", 422)
    # Every answer above was checked against its own schema, the models' and the Error body's.
    assert len(check.seen) >= 15
