"""``/api/tasks``: submit a bulk task, read its progress and events, cancel or retry it, tune
a fed task's feed (parallel, interval, priority; pause, resume)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import TypeVar

from flask import Blueprint, Response, request

from asynctask.errors import (
    JobArgumentsError,
    JobsNotSent,
    TaskNotFed,
    TaskNotFound,
    TaskStateError,
    TaskWaiting,
)
from asynctask.tasks.feedview import with_held
from asynctask.tasks.queue_place import with_ahead
from asynctask.tasks.service import Tracking
from asynctask.tracking import queries
from asynctask.tracking.parents import UnknownParent
from asynctask.tracking.status import EventStatus, TaskStatus
from asynctask.tracking.views import Page, TaskView
from webapi import bodies
from webapi.auth import caller_tenant
from webapi.errors import ApiError
from webapi.feeds import read_change
from webapi.intake import JSON_TYPES, read_submission
from webapi.resources import db, resources
from webapi.responses import json_response
from webapi.serialize import event_json, failed_item_json, feed_json, task_json, task_urls

T = TypeVar("T")

tasks = Blueprint("tasks", __name__, url_prefix="/api/tasks")

#: First errors a task's snapshot includes unless ``?errors=`` says otherwise, and the most it may ask.
DEFAULT_ERRORS = 10
MAX_ERRORS = 100
_NOT_CANCELLABLE = {TaskStatus.FINISHED, TaskStatus.FINISHED_WITH_ERRORS, TaskStatus.ABORTED}


@tasks.post("")
def create() -> Response:
    found = resources()
    submission = read_submission(request, found.config, found.client.registry, caller_tenant())
    try:
        view = found.tracking.create_task(submission.job, submission.items, submission.options)
    except ValueError as exc:
        if submission.item_count == 0:
            raise ApiError(422, "no_items", "a task needs at least one item") from None
        raise ApiError(422, "invalid_request", str(exc)) from None
    except UnknownParent as exc:
        raise ApiError(
            422,
            "unknown_parent",
            f"no task {exc.task_id!r} to wait for",
            {"field": "after", "task_id": exc.task_id},
        ) from None
    except JobArgumentsError as exc:
        # The items are always one argument: only a callback's arguments can miss.
        raise ApiError(422, "invalid_request", str(exc), {"field": "callback_args"}) from None
    except JobsNotSent as exc:
        raise not_sent(exc) from None
    finally:
        submission.close()
    body: bodies.CreatedTask = {
        "task_id": view.id,
        "job": view.job_name,
        "items": submission.item_count,
        "jobs": view.total,
        "chunk_size": submission.options.chunk_size,
        "status": view.status,
        "feed": feed_json(view.feed),
        "urls": task_urls(view.id),
        "warnings": [{"code": warning.code, "message": warning.message} for warning in view.warnings],
    }
    response = json_response(body, 202)
    response.headers["Location"] = task_urls(view.id)["self"]
    return response


@tasks.get("")
def index() -> Response:
    before = request.args.get("before")
    limit = _int_arg("limit", 50)
    page = _page(
        lambda: queries.list_tasks(db(), caller_tenant(), before=_decode_cursor(before), limit=limit)
    )
    cursor = page.next_cursor
    body: bodies.TaskPage = {
        "items": [task_json(v) for v in page.items],
        "next": _encode_cursor(cursor) if cursor else None,
    }
    return json_response(body)


@tasks.get("/<task_id>")
def show(task_id: str) -> Response:
    client = resources().client
    return json_response(
        task_json(with_ahead(with_held(task_or_404(task_id, errors_arg()), client), client, db()))
    )


@tasks.patch("/<task_id>")
def tune(task_id: str) -> Response:
    """Change a fed task's parallel, interval or priority while it runs."""
    if request.mimetype not in JSON_TYPES and not request.mimetype.endswith("+json"):
        raise ApiError(
            415,
            "unsupported_media_type",
            "send the changes as application/json",
            {"content_type": request.mimetype or None},
        )
    change = read_change(request.stream, resources().config)
    return _feed_changed(
        task_id, lambda tracking: tracking.update_task(task_id, **change, tenant=caller_tenant())
    )


@tasks.post("/<task_id>/pause")
def pause(task_id: str) -> Response:
    """Release no more of a fed task's jobs; those released go on."""
    return _feed_changed(task_id, lambda tracking: tracking.pause_task(task_id, tenant=caller_tenant()))


@tasks.post("/<task_id>/resume")
def resume(task_id: str) -> Response:
    return _feed_changed(task_id, lambda tracking: tracking.resume_task(task_id, tenant=caller_tenant()))


def _feed_changed(task_id: str, change: Callable[[Tracking], object]) -> Response:
    """Apply ``change`` to the caller's fed task; the task as it is then."""
    found = resources()
    try:
        change(found.tracking)
    except TaskNotFound:
        raise ApiError(404, "task_not_found", f"no task {task_id!r}") from None
    except TaskNotFed:
        raise ApiError(
            409, "task_not_fed", "the task was created without parallel: it has no feed to change"
        ) from None
    except TaskWaiting as exc:
        raise ApiError(409, "task_waiting", str(exc)) from None
    except TaskStateError as exc:
        raise ApiError(409, "task_ended", str(exc)) from None
    return json_response(task_json(found.tracking.get_task(task_id, tenant=caller_tenant())))


@tasks.get("/<task_id>/events")
def events(task_id: str) -> Response:
    status = request.args.get("status")
    if status is not None and status not in {s.value for s in EventStatus}:
        raise ApiError(
            422,
            "invalid_request",
            f"status must be one of {', '.join(s.value for s in EventStatus)}",
            {"field": "status"},
        )
    after = request.args.get("after")
    limit = _int_arg("limit", 100)
    page = _page(
        lambda: queries.list_events(
            db(), task_id, status=status, after=after, limit=limit, tenant=caller_tenant()
        )
    )
    body: bodies.EventPage = {"items": [event_json(e) for e in page.items], "next": page.next_cursor}
    return json_response(body)


#: What ``/items?status=`` lists: items that ended well are counted on the task, not kept one by one.
ITEM_STATUSES = ("failed",)


@tasks.get("/<task_id>/items")
def items(task_id: str) -> Response:
    status = request.args.get("status", "failed")
    if status not in ITEM_STATUSES:
        raise ApiError(
            422,
            "invalid_request",
            "status must be failed: items that ended well are counted (the task's items.done), not listed",
            {"field": "status"},
        )
    after = request.args.get("after")
    limit = _int_arg("limit", 100)
    page = _page(
        lambda: queries.list_failed_items(db(), task_id, after=after, limit=limit, tenant=caller_tenant())
    )
    body: bodies.FailedItemPage = {
        "items": [failed_item_json(i) for i in page.items],
        "next": page.next_cursor,
    }
    return json_response(body)


@tasks.post("/<task_id>/cancel")
def cancel(task_id: str) -> Response:
    view = task_or_404(task_id, 0)
    if view.status in _NOT_CANCELLABLE:
        raise ApiError(
            409, "task_not_cancellable", f"the task is {view.status}; there is nothing left to cancel"
        )
    found = resources()
    found.tracking.cancel_task(task_id, tenant=caller_tenant())
    return json_response(task_json(found.tracking.get_task(task_id, tenant=caller_tenant())))


@tasks.post("/<task_id>/retry")
def retry(task_id: str) -> Response:
    task_or_404(task_id, 0)
    found = resources()
    try:
        retried = found.tracking.retry_task(task_id, tenant=caller_tenant())
    except TaskStateError as exc:
        raise ApiError(409, "task_not_retryable", str(exc)) from None
    except JobsNotSent as exc:
        raise not_sent(exc) from None
    view = found.tracking.get_task(task_id, tenant=caller_tenant())
    return json_response(bodies.RetryResult(retried=retried, task=task_json(view)), 202)


def not_sent(exc: JobsNotSent) -> ApiError:
    """Another runtime refused some of the task's jobs: the task exists and shows them ended."""
    return ApiError(
        503,
        "jobs_not_sent",
        str(exc),
        {"task_id": exc.task_id, "sent": exc.sent, "jobs": exc.total, "urls": task_urls(exc.task_id)},
    )


def errors_arg() -> int:
    """``?errors=``: how many of the task's first failed/error events to include."""
    errors = _int_arg("errors", DEFAULT_ERRORS)
    if not 0 <= errors <= MAX_ERRORS:
        raise ApiError(422, "invalid_request", f"errors must be from 0 to {MAX_ERRORS}", {"field": "errors"})
    return errors


def task_or_404(task_id: str, errors: int) -> TaskView:
    """The caller's task: another tenant's task is as absent as a task that never existed."""
    try:
        return queries.get_task(
            db(), task_id, tenant=caller_tenant(), errors=errors, cache=resources().errors
        )
    except TaskNotFound:
        raise ApiError(404, "task_not_found", f"no task {task_id!r}") from None


def _page(read: Callable[[], Page[T]]) -> Page[T]:
    try:
        return read()
    except TaskNotFound as exc:
        raise ApiError(404, "task_not_found", f"no task {exc.task_id!r}") from None
    except ValueError as exc:
        message = str(exc)
        if "cursor" in message:
            raise ApiError(422, "invalid_cursor", message) from None
        raise ApiError(422, "invalid_request", message, {"field": "limit"}) from None


def _encode_cursor(cursor: str) -> str:
    """The tasks cursor holds a time with a "+"; base64url keeps it intact in a query string."""
    return base64.urlsafe_b64encode(cursor.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise ApiError(422, "invalid_cursor", f"invalid tasks cursor {cursor!r}") from None


def _int_arg(name: str, default: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError(422, "invalid_request", f"{name} must be an integer", {"field": name}) from None
