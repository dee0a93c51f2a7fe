"""JSON responses written with the standard encoder directly (no key sorting, no indentation):
status reads are the hot path."""

from __future__ import annotations

import json
from typing import Any

from flask import Response


def json_response(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), status=status, mimetype="application/json")
