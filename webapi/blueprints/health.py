"""``/healthz`` (the process answers) and ``/readyz`` (the broker and the database answer)."""

from __future__ import annotations

from flask import Blueprint, Response
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from asynctask.tracking.models import Task
from webapi import bodies
from webapi.errors import error_response
from webapi.resources import resources
from webapi.responses import json_response

health = Blueprint("health", __name__)


@health.get("/healthz")
def healthz() -> Response:
    return json_response(bodies.Health(status="ok"))


@health.get("/readyz")
def readyz() -> Response:
    found = resources()
    checks: dict[str, str] = {}
    try:
        found.client.broker.ping()
        checks["broker"] = "ok"
    except found.client.broker.errors as exc:
        checks["broker"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    try:
        # Reading the task table also proves the migrations ran.
        with found.engine.connect() as connection:
            connection.execute(select(Task.id).limit(1)).all()
        checks["database"] = "ok"
    except SQLAlchemyError as exc:
        checks["database"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    if all(value == "ok" for value in checks.values()):
        return json_response(bodies.Ready(status="ready", checks={"broker": "ok", "database": "ok"}))
    return error_response(503, "unavailable", "a backing service is not ready", {"checks": checks})
