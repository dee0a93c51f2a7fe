"""``GET /api/keys``: the caller's busy concurrency keys, busiest first.

A tenant sees only its own keys (those its tasks were given; ``itemkeys.tenant_prefix``),
named as it wrote them: another tenant's keys, and the jids holding them, are none of its
business. Without authentication (development) every key is listed as stored.
"""

from __future__ import annotations

from flask import Blueprint, Response, request

from asynctask.tasks.itemkeys import tenant_prefix
from webapi import bodies
from webapi.auth import caller_tenant
from webapi.bodies import MAX_HOLDERS, MAX_KEYS
from webapi.errors import ApiError
from webapi.resources import resources
from webapi.responses import json_response

keys = Blueprint("keys", __name__, url_prefix="/api/keys")

DEFAULT_KEYS = 100


@keys.get("")
def index() -> Response:
    limit = _limit()
    busy = resources().busy_keys.busiest(limit, prefix=tenant_prefix(caller_tenant()))
    body: bodies.BusyKeys = {
        "items": [
            {
                "key": key.key,
                "limit": key.limit,
                "holding": len(key.holders),
                "holders": key.holders[:MAX_HOLDERS],
                "waiting": key.waiting,
            }
            for key in busy
        ]
    }
    return json_response(body)


def _limit() -> int:
    raw = request.args.get("limit")
    if raw is None:
        return DEFAULT_KEYS
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_KEYS:
        raise ApiError(
            422, "invalid_request", f"limit must be an integer from 1 to {MAX_KEYS}", {"field": "limit"}
        )
    return limit
