"""``/openapi.json``: a valid OpenAPI 3.1 document that lists exactly the routes the app serves."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest
import schemathesis
from flask import Flask
from sqlalchemy import create_engine

import asynctask
from asynctask import Client, Settings
from asynctask.tasks.options import MAX_CONCURRENCY_LIMIT
from asynctask.tracking.queries import MAX_PAGE
from webapi import create_app
from webapi.blueprints.tasks import MAX_ERRORS
from webapi.bodies import MAX_KEYS
from webapi.formats import BODY_FIELDS
from webapi.openapi import document

#: Methods Flask adds to every route by itself.
IMPLICIT_METHODS = {"HEAD", "OPTIONS"}
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def app() -> Iterator[Flask]:
    # Nothing is read or written: neither Redis nor the database is contacted.
    engine = create_engine("sqlite://")
    yield create_app({}, client=Client(Settings()), engine=engine)
    engine.dispose()


def routes(app: Flask) -> set[tuple[str, str]]:
    found = set()
    for rule in app.url_map.iter_rules():
        # The dashboard's pages are HTML for a logged-in browser (docs/guide/dashboard.md), not
        # operations of the JSON API.
        if rule.endpoint.endswith(".static") or rule.endpoint.startswith("asynctask.dashboard."):
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        for method in (rule.methods or set()) - IMPLICIT_METHODS:
            found.add((path, method.lower()))
    return found


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield path, method, operation


def resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = doc
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["version"] == asynctask.__version__
    # The official 3.1 meta-schema (schemathesis carries it; the same check runs before a fuzz run).
    schemathesis.openapi.from_dict(doc).validate()
    # The meta-schema leaves schema objects alone: check them against JSON Schema 2020-12.
    for schema in doc["components"]["schemas"].values():
        jsonschema_rs.meta.validate({"$schema": "https://json-schema.org/draft/2020-12/schema", **schema})
    # Every reference resolves.
    refs = re.findall(r'"\$ref": "([^"]+)"', json.dumps(doc))
    assert refs
    for ref in set(refs):
        assert resolve(doc, {"$ref": ref}) is not None
    # JSON-safe: served as is by /openapi.json.
    assert json.loads(json.dumps(doc)) == doc


def test_the_document_lists_exactly_the_apps_routes(app: Flask) -> None:
    documented = {(path, method) for path, method, _ in operations(document())}
    assert documented == routes(app)


def test_operation_ids_are_unique_and_api_routes_need_the_token() -> None:
    doc = document()
    ids = [operation["operationId"] for _, _, operation in operations(doc)]
    assert len(ids) == len(set(ids))
    scheme = doc["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, _, operation in operations(doc):
        # /metrics is where Prometheus looks by default, outside /api/ but an operator's.
        if path.startswith("/api/") or path == "/metrics":
            assert operation["security"] == [{"bearer": []}], path
            assert "401" in operation["responses"], path
        else:
            assert operation.get("security", []) == [], path
            assert "401" not in operation["responses"], path


def test_limits_match_the_code() -> None:
    doc = document()

    def query(path: str, name: str) -> dict[str, Any]:
        (found,) = [p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == name]
        schema: dict[str, Any] = found["schema"]
        return schema

    assert query("/api/tasks", "limit") == {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_PAGE,
        "default": 50,
    }
    assert query("/api/tasks/{task_id}/events", "limit")["maximum"] == MAX_PAGE == 1000
    assert query("/api/tasks/{task_id}", "errors") == {
        "type": "integer",
        "minimum": 0,
        "maximum": MAX_ERRORS,
        "default": 10,
    }
    assert query("/api/tasks/{task_id}/stream", "errors") == query("/api/tasks/{task_id}", "errors")
    submission = doc["components"]["schemas"]["TaskSubmission"]
    # The code rejects unknown fields, so the document does too.
    assert submission["additionalProperties"] is False
    assert set(submission["properties"]) == BODY_FIELDS
    assert submission["properties"]["concurrency_limit"]["maximum"] == MAX_CONCURRENCY_LIMIT
    keys_limit = {"type": "integer", "minimum": 1, "maximum": MAX_KEYS, "default": 100}
    assert query("/api/keys", "limit") == keys_limit
    assert set(doc["paths"]["/api/tasks"]["post"]["requestBody"]["content"]) == {
        "application/json",
        "text/csv",
        "application/x-ndjson",
        "application/jsonl",
        "multipart/form-data",
    }


def test_the_app_serves_the_document(app: Flask) -> None:
    response = app.test_client().get("/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_json() == document()
