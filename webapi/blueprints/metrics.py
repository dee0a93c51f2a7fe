"""``GET /metrics``: the broker's state in Prometheus' text format (``webapi.metrics``).

It is the deployment's, not a tenant's: only operators may read it, as ``/api/periodic``.
"""

from __future__ import annotations

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webapi.auth import require_operator
from webapi.resources import resources

metrics = Blueprint("metrics", __name__)


@metrics.get("/metrics")
def index() -> Response:
    found = resources()
    require_operator(found.config.operator_tenants)
    return Response(generate_latest(found.metrics), content_type=CONTENT_TYPE_LATEST)
