"""``GET /api/jobs``: the jobs a caller may submit, and the schema of their items;
``POST /api/jobs/<jid>/stop`` and ``/resume``: stop a resumable job of the caller's tasks
and resume it from its checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from flask import Blueprint, Response

from asynctask.errors import JobNotFound, JobStateError
from asynctask.tasks.jobs import StopState
from asynctask.tasks.service import Tracking
from webapi import bodies
from webapi.auth import caller_tenant
from webapi.errors import ApiError
from webapi.resources import resources
from webapi.responses import json_response

T = TypeVar("T")

jobs = Blueprint("jobs", __name__, url_prefix="/api/jobs")


@jobs.get("")
def index() -> Response:
    listed: list[bodies.Job] = [
        {
            "name": definition.name,
            "queue": definition.options.queue,
            "description": _summary(definition.__doc__),
            "schema": definition.item_schema,
        }
        for definition in sorted(resources().client.registry, key=lambda d: d.name)
        if definition.api
    ]
    body: bodies.Jobs = {"jobs": listed}
    return json_response(body)


@jobs.post("/<jid>/stop")
def stop(jid: str) -> Response:
    """202 while the job runs on to its next checkpoint; 200 once it is parked."""
    state = _control(jid, lambda tracking: tracking.stop_job(jid, tenant=caller_tenant()))
    if state == StopState.STOPPED:
        return json_response(bodies.JobStop(jid=jid, state="stopped"))
    return json_response(bodies.JobStop(jid=jid, state="stopping"), 202)


@jobs.post("/<jid>/resume")
def resume(jid: str) -> Response:
    queue = _control(jid, lambda tracking: tracking.resume_job(jid, tenant=caller_tenant()))
    return json_response(bodies.JobResume(jid=jid, state="enqueued", queue=queue))


def _control(jid: str, act: Callable[[Tracking], T]) -> T:
    try:
        return act(resources().tracking)
    except JobNotFound:
        raise ApiError(404, "job_not_found", f"no job {jid!r}") from None
    except JobStateError as exc:
        raise ApiError(409, exc.code, str(exc)) from None


def _summary(doc: str | None) -> str | None:
    lines = [line.strip() for line in (doc or "").strip().splitlines()]
    return lines[0] if lines and lines[0] else None
