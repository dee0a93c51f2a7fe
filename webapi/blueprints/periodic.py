"""``GET /api/periodic``: the broker's periodic schedules, with their last and next runs.

The schedules are the deployment's, declared by its workers, not a tenant's: only operators
may read them (operators' tokens, and tokens of the operator tenants, ``operator_tenants``).
"""

from __future__ import annotations

from flask import Blueprint, Response

from webapi import bodies
from webapi.auth import require_operator
from webapi.resources import resources
from webapi.responses import json_response
from webapi.serialize import schedule_json

periodic = Blueprint("periodic", __name__, url_prefix="/api/periodic")


@periodic.get("")
def index() -> Response:
    found = resources()
    require_operator(found.config.operator_tenants)
    # Sorted here: a SQL broker orders names by its database's collation, which may not be
    # code-point order.
    entries = sorted(found.periodic, key=lambda entry: entry.name)
    body: bodies.Schedules = {"schedules": [schedule_json(entry) for entry in entries]}
    return json_response(body)
