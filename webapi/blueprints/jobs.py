"""``GET /api/jobs``: the jobs a caller may submit, and the schema of their items."""

from __future__ import annotations

from flask import Blueprint, Response

from webapi.resources import resources
from webapi.responses import json_response

jobs = Blueprint("jobs", __name__, url_prefix="/api/jobs")


@jobs.get("")
def index() -> Response:
    listed = [
        {
            "name": definition.name,
            "queue": definition.options.queue,
            "description": _summary(definition.__doc__),
            "schema": definition.item_schema,
        }
        for definition in sorted(resources().client.registry, key=lambda d: d.name)
        if definition.api
    ]
    return json_response({"jobs": listed})


def _summary(doc: str | None) -> str | None:
    lines = [line.strip() for line in (doc or "").strip().splitlines()]
    return lines[0] if lines and lines[0] else None
