"""``/api/queues``: an operator lists the broker's queues, pauses, resumes and clears one, on
Redis and on a SQL broker; anyone else is refused, and a bad name is a 422, never a 5xx."""

from __future__ import annotations

from typing import Any

import pytest

from asynctask.api import Queue
from tests.webapi.conftest import Api, MakeApi
from tests.webapi.test_api import error_of
from tests.webapi.test_periodic import OPERATORS, operator


@pytest.fixture
def api(make: MakeApi) -> Api:
    return make(operator_tenants=OPERATORS)


def listed(api: Api, token: str) -> list[dict[str, Any]]:
    response = api.get("/api/queues", token)
    assert response.status_code == 200, response.get_json()
    queues: list[dict[str, Any]] = response.get_json()["queues"]
    return queues


def push(api: Api, queue: str, count: int) -> None:
    api.client.push_bulk({"class": "internal", "args": [[[]]] * count, "queue": queue})


def test_an_operator_pauses_resumes_and_clears_a_queue(api: Api) -> None:
    ops = operator(api)
    push(api, "mail", 3)
    push(api, "default", 1)
    assert [(q["name"], q["size"], q["paused"]) for q in listed(api, ops)] == [
        ("default", 1, False),
        ("mail", 3, False),
    ]

    response = api.post("/api/queues/mail/pause", ops)

    assert response.status_code == 200
    body = response.get_json()
    assert (body["name"], body["size"], body["paused"]) == ("mail", 3, True) and body["latency"] >= 0
    assert Queue("mail", settings=api.client.settings).paused
    # Twice is the same; a queue no job was ever pushed to can be paused too.
    assert api.post("/api/queues/mail/pause", ops).get_json()["paused"] is True
    assert api.post("/api/queues/later/pause", ops).get_json() == {
        "name": "later",
        "size": 0,
        "latency": 0,
        "paused": True,
    }
    assert [(q["name"], q["paused"]) for q in listed(api, ops)] == [
        ("default", False),
        ("later", True),
        ("mail", True),
    ]

    cleared = api.post("/api/queues/mail/clear", ops).get_json()
    assert (cleared["cleared"], cleared["size"], cleared["paused"]) == (3, 0, True)

    resumed = api.post("/api/queues/mail/resume", ops).get_json()
    assert (resumed["name"], resumed["paused"]) == ("mail", False)
    assert api.post("/api/queues/mail/resume", ops).status_code == 200
    assert not Queue("mail", settings=api.client.settings).paused
    assert [(q["name"], q["paused"]) for q in listed(api, ops)] == [("default", False), ("later", True)]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/queues"),
        ("post", "/api/queues/mail/pause"),
        ("post", "/api/queues/mail/resume"),
        ("post", "/api/queues/mail/clear"),
    ],
)
def test_only_operators_see_or_touch_the_queues(api: Api, method: str, path: str) -> None:
    push(api, "mail", 1)
    for token in (api.acme, api.globex):
        response = getattr(api.http, method)(path, headers=api.headers(token))
        assert (response.status_code, error_of(response)["code"]) == (403, "operator_only")
    response = getattr(api.http, method)(path)
    assert (response.status_code, error_of(response)["code"]) == (401, "unauthorized")
    assert Queue("mail", settings=api.client.settings).size == 1
    assert not Queue("mail", settings=api.client.settings).paused


@pytest.mark.parametrize("name", ["a%00b", "tab%09", "caf%C3%A9", "q" * 256, "%7F"])
@pytest.mark.parametrize("action", ["pause", "resume", "clear"])
def test_a_bad_queue_name_is_a_422(api: Api, name: str, action: str) -> None:
    response = api.post(f"/api/queues/{name}/{action}", operator(api))
    assert response.status_code == 422
    error = error_of(response)
    assert (error["code"], error["details"]) == ("invalid_queue", {"field": "name"})
    assert listed(api, operator(api)) == []


def test_a_name_with_a_slash_is_no_route(api: Api) -> None:
    response = api.post("/api/queues/a/b/pause", operator(api))
    assert (response.status_code, error_of(response)["code"]) == (404, "not_found")
