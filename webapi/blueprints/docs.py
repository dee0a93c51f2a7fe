"""``GET /openapi.json``: the API described as OpenAPI 3.1 (built once per app)."""

from __future__ import annotations

from functools import cache

from flask import Blueprint, Response

from webapi.openapi import document
from webapi.responses import json_response

docs = Blueprint("docs", __name__)


@docs.get("/openapi.json")
def openapi() -> Response:
    return json_response(_document())


@cache
def _document() -> dict[str, object]:
    return document()
