"""``GET /openapi.json``: the API described as OpenAPI 3.1 (built once per process). Mounted under a
prefix (or a WSGI script root), the document names it as its server, so that its paths, written
from the API's root, lead to the right place."""

from __future__ import annotations

from functools import cache

from flask import Blueprint, Response, request

from webapi.openapi import document
from webapi.resources import resources
from webapi.responses import json_response

docs = Blueprint("docs", __name__)


@docs.get("/openapi.json")
def openapi() -> Response:
    root = request.script_root + resources().url_prefix
    if not root:
        return json_response(_document())
    return json_response({**_document(), "servers": [{"url": root}]})


@cache
def _document() -> dict[str, object]:
    return document()
