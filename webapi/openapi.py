"""The API described as OpenAPI 3.1 (served as ``GET /openapi.json``).

Written by hand next to the code it describes; ``tests/webapi/test_openapi.py`` checks that it is
a valid document and lists exactly the routes the app serves, and ``tests/webapi/test_fuzz.py``
sends generated requests to the app and checks every response against it.
"""

from __future__ import annotations

import json
from typing import Any

import asynctask
from asynctask.brokers.periodic import FORGET_AFTER
from asynctask.tasks.options import TaskOptions
from asynctask.tracking.queries import MAX_PAGE
from asynctask.tracking.status import UNDONE, EventStatus, TaskStatus
from webapi.blueprints.keys import DEFAULT_KEYS, MAX_HOLDERS, MAX_KEYS
from webapi.blueprints.queues import QUEUE_PATH_NAME
from webapi.blueprints.tasks import DEFAULT_ERRORS, MAX_ERRORS
from webapi.feeds import FIELDS as FEED_FIELDS
from webapi.serialize import SUMMARY_ERROR_CHARS

Schema = dict[str, Any]

#: The content type of every JSON body, request or response.
JSON = "application/json"
BEARER = "bearer"
#: The events cursor: the id of the last event of the previous page (digits; 18 at most keep it
#: within a 64-bit integer, what the column holds).
EVENT_CURSOR = "^[0-9]{1,18}$"
#: The failed items cursor: the last item's event id and its place in its chunk.
ITEM_CURSOR = "^[0-9]{1,18}-[0-9]{1,9}$"
#: The tasks cursor: opaque (``<created_at>|<id>`` of the last task of the page, base64url).
TASK_CURSOR = "^[A-Za-z0-9_-]+$"

#: Items of the examples (a product import: the contract's running example).
EXAMPLE_ITEMS = [{"sku": "A1", "price": "9.99"}, {"sku": "B2", "price": "-1"}]
EXAMPLE_NDJSON = "".join(f"{json.dumps(item)}\n" for item in EXAMPLE_ITEMS)
EXAMPLE_CSV = "sku,price\n" + "".join(f"{item['sku']},{item['price']}\n" for item in EXAMPLE_ITEMS)


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "AsyncTask API",
            "version": asynctask.__version__,
            "summary": "Submit bulk tasks (JSON, CSV, NDJSON or an upload) and follow their progress.",
            "description": (
                "Every `/api/*` request needs `Authorization: Bearer <token>` (a token is bound to one "
                "tenant; `asynctask tokens create --tenant NAME`). A task of another tenant is reported "
                "as absent (404 `task_not_found`). The periodic schedules and the queues are the "
                "deployment's: only an operator's token (`asynctask tokens create --operator`, or any token "
                "of a tenant of `ASYNCTASK_API_OPERATOR_TENANTS`) may read or act on them, any other is "
                "refused (403 "
                "`operator_only`). Every 4xx/5xx response has the `Error` body; its "
                "`error.code` is stable, its `message` is for people. Unknown routes answer 404 "
                "`not_found`, a wrong method 405 `method_not_allowed` with an `Allow` header."
            ),
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "tags": [
            {
                "name": "tasks",
                "description": "Bulk tasks: create, read, follow, cancel, retry; tune, pause and resume a "
                "fed task.",
            },
            {"name": "jobs", "description": "The jobs a caller may submit; stopping and resuming one job."},
            {"name": "keys", "description": "Concurrency keys whose jobs run or wait."},
            {"name": "periodic", "description": "Periodic schedules (operators only)."},
            {"name": "queues", "description": "Queues: list, pause, resume, clear (operators only)."},
            {"name": "operations", "description": "Prometheus metrics (operators only)."},
            {"name": "service", "description": "Health checks, this document and the example page."},
        ],
        "paths": _paths(),
        "components": {
            "schemas": _schemas(),
            "responses": _responses(),
            "parameters": _parameters(),
            "headers": {
                "Location": {
                    "description": "The new task's URL (`/api/tasks/{task_id}`).",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^/api/tasks/[^/]+$"},
                },
                "WWW-Authenticate": {
                    "description": "The scheme to use: `Bearer`.",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^Bearer"},
                },
                "Retry-After": {
                    "description": "Seconds to wait before opening the stream again.",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[0-9]+$"},
                },
            },
            "securitySchemes": {
                BEARER: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API token (`atk_...`) bound to one tenant.",
                }
            },
        },
    }


# --- helpers -------------------------------------------------------------------------------------


def _ref(name: str, kind: str = "schemas") -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def _nullable(schema: Schema) -> Schema:
    """``schema`` or null, the 3.1 way (a type list; a ``$ref`` goes in ``anyOf``)."""
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(properties: dict[str, Schema], *, optional: tuple[str, ...] = (), **extra: Any) -> Schema:
    """A closed object whose properties are all required unless listed in ``optional``."""
    return {
        "type": "object",
        "required": [name for name in properties if name not in optional],
        "properties": properties,
        "additionalProperties": False,
        **extra,
    }


def _string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def _integer(minimum: int | None = None, maximum: int | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": "integer", **extra}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _time(description: str, *, nullable: bool = True) -> Schema:
    schema = _string(format="date-time", description=description)
    return _nullable(schema) if nullable else schema


def _array(items: Schema, **extra: Any) -> Schema:
    return {"type": "array", "items": items, **extra}


def _json(schema: Schema) -> dict[str, Any]:
    return {JSON: {"schema": schema}}


def _response(description: str, schema: Schema, **headers: Schema) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": _json(schema)}
    if headers:
        response["headers"] = headers
    return response


def _query(name: str, schema: Schema, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _errors(*statuses: int) -> dict[str, Any]:
    """References to the shared error responses, by status."""
    return {str(status): _ref(_ERROR_RESPONSES[status][0], "responses") for status in statuses}


def _operation(
    operation_id: str,
    summary: str,
    tag: str,
    responses: dict[str, Any],
    *,
    secured: bool = True,
    parameters: list[Any] | None = None,
    request_body: dict[str, Any] | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    operation: dict[str, Any] = {"operationId": operation_id, "summary": summary, "tags": [tag]}
    if description:
        operation["description"] = description
    if parameters:
        operation["parameters"] = parameters
    if request_body:
        operation["requestBody"] = request_body
    if secured:
        responses = {**responses, **_errors(401, 503)}
    operation["responses"] = dict(sorted(responses.items()))
    operation["security"] = [{BEARER: []}] if secured else []
    return operation


# --- components ----------------------------------------------------------------------------------

#: Shared error responses: status -> (component name, description).
_ERROR_RESPONSES: dict[int, tuple[str, str]] = {
    400: (
        "BadRequest",
        "`invalid_json` (the body or an NDJSON line is not JSON; `details.line` for NDJSON), "
        "`invalid_csv` (not UTF-8, a bad header, a row of another width; `details.line`) or "
        "`invalid_request` (a malformed request, e.g. a broken multipart body).",
    ),
    401: ("Unauthorized", "`unauthorized`: the token is missing, malformed, unknown or revoked."),
    403: (
        "Forbidden",
        "`operator_only`: the token is not an operator's (`asynctask tokens create --operator`) and its "
        "tenant is not one of the operator tenants (`ASYNCTASK_API_OPERATOR_TENANTS`).",
    ),
    404: ("TaskNotFound", "`task_not_found`: no such task for this token's tenant."),
    409: (
        "Conflict",
        "`task_not_cancellable` (the task is finished or aborted), `task_not_retryable` "
        "(the task is cancelled), `task_not_fed` (changing the feed of a task created without "
        "`parallel`) or `task_ended` (changing the feed of a task that is finished, cancelled or aborted).",
    ),
    413: (
        "TooLarge",
        "`body_too_large` (`details`: `{limit: max_body_bytes, max}`), `too_many_items` "
        "(`details`: `{limit: max_items, max}`) or `item_too_large` (one item, NDJSON line, CSV "
        "record or `meta` is longer than `max_item_bytes`; `details`: `{limit: max_item_bytes, max}`).",
    ),
    415: (
        "UnsupportedMediaType",
        "`unsupported_media_type`: another body type, or an uploaded file that is not CSV, NDJSON "
        "or JSON (`details.content_type`).",
    ),
    422: ("Unprocessable", "A parameter or field is wrong; see `error.code` and `error.details`."),
    429: (
        "TooManyStreams",
        "`too_many_streams`: the tenant has `max_tenant_streams` progress streams open in this server "
        "process (`details`: `{limit: max_tenant_streams, max}`); retry after `Retry-After` seconds, "
        "or poll the task.",
    ),
    503: (
        "Unavailable",
        "`unavailable`: Redis or the database cannot be reached; `database_busy`: every connection of "
        "the server process's database pool is in use (a `Retry-After` header). On the stream also "
        "`streams_unavailable`: the server process holds `max_streams` streams (`details`: "
        "`{limit: max_streams, max}`, and a `Retry-After` header).",
    ),
}


def _responses() -> dict[str, Any]:
    responses = {
        name: _response(description, _ref("Error")) for name, description in _ERROR_RESPONSES.values()
    }
    responses["Unauthorized"]["headers"] = {"WWW-Authenticate": _ref("WWW-Authenticate", "headers")}
    responses["TooManyStreams"]["headers"] = {"Retry-After": _ref("Retry-After", "headers")}
    return responses


def _parameters() -> dict[str, Any]:
    return {
        "TaskId": {
            "name": "task_id",
            "in": "path",
            "required": True,
            "description": "The task's id (`task_id` of the 202 that created it).",
            "schema": _string(minLength=1),
        },
        "QueueName": {
            "name": "name",
            "in": "path",
            "required": True,
            "description": "The queue's name.",
            "schema": _string(pattern=f"^{QUEUE_PATH_NAME.pattern}$"),
        },
        "Jid": {
            "name": "jid",
            "in": "path",
            "required": True,
            "description": "The job's jid (`job_id` of its event).",
            "schema": _string(minLength=1),
        },
    }


def _schemas() -> dict[str, Schema]:
    event_statuses = [s.value for s in EventStatus]
    urls = _obj(
        {
            "self": _string(format="uri-reference", description="`/api/tasks/{id}`"),
            "events": _string(format="uri-reference", description="`/api/tasks/{id}/events`"),
            "items": _string(format="uri-reference", description="`/api/tasks/{id}/items?status=failed`"),
            "stream": _string(format="uri-reference", description="`/api/tasks/{id}/stream`"),
        },
        description="Where to read the task.",
    )
    counts = _obj(
        {status: _integer(0) for status in event_statuses},
        description="Jobs of the task per event status (`stopped`: resumable jobs stopped by `stop_job`, "
        "kept with their checkpoint until resumed).",
    )
    message = _obj(
        {
            "at": _time("When it was written.", nullable=False),
            "status": _string(description="The job's status then."),
            "text": _string(),
        },
        description="One line of a job's message log.",
    )
    event = _obj(
        {
            "id": _integer(1, description="Also the cursor (`after`) of the events list."),
            "job_id": _string(),
            "status": _string(enum=event_statuses),
            "params": _nullable(_array({}, description="The job's arguments (here: one chunk of items).")),
            "attempt": _integer(0),
            "error": _nullable(_string(description="The error message of a failed or error job.")),
            "error_class": _nullable(_string()),
            "progress": _nullable(
                _obj(
                    {"done": _nullable(_integer()), "total": _nullable(_integer())},
                    description="What the job last reported of its own progress.",
                )
            ),
            "items_run": _nullable(
                _obj(
                    {"done": _integer(0), "failed": _integer(0)},
                    description="Items of the job's chunk it ran one by one (`asynctask.each`) that ended "
                    "well and that failed, over every run; null for a job that did not.",
                )
            ),
            "enqueued_at": _time("When the job was last enqueued."),
            "started_at": _time("When the job last started."),
            "finished_at": _time("When the job last ended."),
            "updated_at": _time("The event's last change."),
            "messages": _array(
                _ref("Message"),
                description="The message log, oldest first: its latest 50 messages at most, each text "
                "cut (with `... (truncated, N bytes)`) when the answer's texts would pass its budget.",
            ),
            "earlier_messages": _integer(0, description="Older messages of the log left out of `messages`."),
        },
        description="One job of a task (its tracking event).",
    )
    error_summary = _obj(
        {
            "id": _integer(
                1, description="The event's id: `/events?after=<id - 1>&limit=1` returns it whole."
            ),
            "job_id": _string(),
            "status": _string(enum=[status.value for status in UNDONE]),
            "attempt": _integer(0),
            "error": _nullable(
                _string(
                    description=f"The error message, cut at {SUMMARY_ERROR_CHARS} characters (ending in …)."
                )
            ),
            "error_class": _nullable(_string()),
            "items": _nullable(_integer(0, description="Items in the job's chunk (its first argument).")),
        },
        description="A failed or error job in brief (a progress stream's errors): no parameters, no log.",
    )
    task_fields: dict[str, Schema] = {
        "id": _string(),
        "job": _string(description="The job's name."),
        "queue": _string(),
        "runtime": _string(
            enum=["asynctask", "celery", "rq", "dramatiq"],
            description="What runs the task's jobs: AsyncTask's own workers, or another runtime with "
            "tracking attached (see the guide's Celery, RQ and Dramatiq page).",
        ),
        "status": _string(enum=[s.value for s in TaskStatus]),
        "total": _integer(0, description="Jobs in the task."),
        "counts": _ref("TaskCounts"),
        "done": _integer(0, description="Jobs that will not run again."),
        "progress": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "Items run (done or failed) / `items.total` once any job ran its items one by "
            "one (`asynctask.each`), else `done` / `total`.",
        },
        "items": _obj(
            {
                "total": _integer(0, description="Items in all the task's chunks."),
                "done": _integer(0, description="Items run one by one that ended well."),
                "failed": _integer(
                    0, description="Items run one by one that failed (`/items?status=failed` lists them)."
                ),
            },
            description="The task's items (a task whose jobs run them one by one counts each).",
        ),
        "eta_seconds": _nullable(
            {
                "type": "number",
                "minimum": 0,
                "description": "Seconds left at the rate the task's jobs have been ending at (since its "
                "first start, or since its feed last changed once `parallel` jobs have ended since); null "
                "before any job has ended, while the task is paused or only stopped jobs are left, and once "
                "it is not running.",
            }
        ),
        "ahead": _nullable(
            {
                "type": "integer",
                "minimum": 0,
                "description": "About how many jobs of its queue start before the task's next one (fair "
                "share: a round of the tenants waiting, and its tenant's earlier jobs); null when none of "
                "its jobs waits in the queue, in task lists and in streams.",
            }
        ),
        "feed": _nullable(_ref("Feed")),
        "created_at": _time("When the task was created.", nullable=False),
        "started_at": _time("When its first job started."),
        "finished_at": _time("When its last job ended."),
        "cancelled_at": _time("When it was cancelled."),
        "meta": _nullable({"type": "object", "description": "The `meta` given at creation."}),
        "urls": _ref("Urls"),
    }
    task = _obj(
        {
            **task_fields,
            "errors": _array(
                _ref("Event"),
                description="The first failed/error events (as many as `errors` asks; empty in lists).",
            ),
        },
        description="A task and its progress.",
    )
    snapshot = _obj(
        {
            **task_fields,
            "errors": _array(
                _ref("ErrorSummary"),
                description="The first failed/error jobs (as many as the stream's `errors` asks), in the "
                "first snapshot, the last (`end`) and whenever they change; absent: unchanged.",
            ),
        },
        optional=("errors",),
        description="A task's snapshot in a progress stream.",
    )
    created = _obj(
        {
            "task_id": _string(),
            "job": _string(),
            "items": _integer(1, description="Items received."),
            "jobs": _integer(
                1,
                description="Jobs enqueued: items / chunk_size, rounded up, or more with a "
                "concurrency_key (a chunk holds items of one key).",
            ),
            "chunk_size": _integer(1),
            "status": _string(enum=[s.value for s in TaskStatus]),
            "feed": _nullable(_ref("Feed")),
            "urls": _ref("Urls"),
            "warnings": _array(
                _obj(
                    {
                        "code": _string(
                            enum=["no_worker"],
                            description="`no_worker`: no live worker process listens to the task's queue.",
                        ),
                        "message": _string(),
                    }
                ),
                description="What is worth knowing though the task was created (its jobs wait until a "
                "worker listens to their queue, say); empty when nothing is.",
            ),
        },
        description="The task just created.",
    )
    job = _obj(
        {
            "name": _string(),
            "queue": _string(description="The job's default queue."),
            "description": _nullable(_string(description="The first line of the job's docstring.")),
            "schema": _nullable({"type": "object", "description": "The JSON Schema one item must match."}),
        },
        description="A job the API may create tasks of.",
    )
    submission = _obj(
        {
            "job": _string(minLength=1, description="A job listed by `GET /api/jobs`."),
            "items": _array(
                {},
                minItems=1,
                description="The items (each must match the job's item schema); at most "
                "ASYNCTASK_API_MAX_ITEMS (200000).",
            ),
            **_task_options(as_text=False),
        },
        optional=TaskOptions.request_fields(),
        description="A task as JSON (nesting at most ASYNCTASK_API_MAX_JSON_DEPTH (32) levels).",
        dependentRequired=_NEEDS,
    )
    upload = _obj(
        {
            "job": _string(minLength=1),
            **_task_options(as_text=True),
            "file": _string(
                contentMediaType="application/octet-stream",
                description="CSV (text/csv or a .csv name), NDJSON (application/x-ndjson, .ndjson, "
                ".jsonl) or a JSON array of items (application/json, .json).",
            ),
        },
        optional=TaskOptions.request_fields(),
        description="A task as a file upload; the options are form fields.",
        dependentRequired=_NEEDS,
    )
    return {
        "Error": _obj(
            {
                "error": _obj(
                    {
                        "code": _string(description="Stable; clients branch on it."),
                        "message": _string(description="For people; may change."),
                        "details": {"description": "More about the error (JSON), or null."},
                    }
                )
            },
            description="The body of every 4xx and 5xx response.",
        ),
        "Urls": urls,
        "TaskCounts": counts,
        "Message": message,
        "Event": event,
        "Task": task,
        "ErrorSummary": error_summary,
        "TaskSnapshot": snapshot,
        "CreatedTask": created,
        "RetryResult": _obj(
            {"retried": _integer(0, description="Jobs enqueued again."), "task": _ref("Task")},
            description="The outcome of a retry.",
        ),
        "TaskPage": _obj(
            {
                "items": _array(_ref("Task")),
                "next": _nullable(
                    _string(pattern=TASK_CURSOR, description="Pass as `before` for the next page.")
                ),
            },
            description="Tasks, newest first.",
        ),
        "FailedItem": _obj(
            {
                "id": _integer(1),
                "job_id": _string(description="The job whose chunk held it."),
                "position": _integer(0, description="Its place in the job's chunk, from 0."),
                "item": {"description": "The item as given, or its JSON text cut when over 4 KB."},
                "message": _string(description="Why it failed (the `JobFailed` message)."),
                "at": _time("When it failed.", nullable=False),
            },
            description="An item that failed in its job's chunk; the job went on with the next one.",
        ),
        "FailedItemPage": _obj(
            {
                "items": _array(_ref("FailedItem")),
                "next": _nullable(
                    _string(pattern=ITEM_CURSOR, description="Pass as `after` for the next page.")
                ),
            },
            description="Failed items in the task's order of items: its jobs' order, then each item's "
            "place in its chunk.",
        ),
        "EventPage": _obj(
            {
                "items": _array(_ref("Event")),
                "next": _nullable(
                    _string(pattern=EVENT_CURSOR, description="Pass as `after` for the next page.")
                ),
            },
            description="Events, oldest first.",
        ),
        "StreamEvent": _obj(
            {
                "event": _string(enum=["progress", "end"]),
                "data": _string(
                    contentMediaType=JSON,
                    contentSchema=_ref("TaskSnapshot"),
                    description="The task's snapshot (JSON on one line).",
                ),
                "id": _string(),
                "retry": _integer(0, description="Milliseconds to wait before reconnecting."),
            },
            optional=("id", "retry"),
            description="One Server-Sent Event of `GET /api/tasks/{task_id}/stream` (fields as parsed).",
        ),
        "Feed": _obj(
            {
                **_feed_fields(),
                "paused": {"type": "boolean", "description": "No job is released until the task is resumed."},
                "held": _nullable(
                    _integer(
                        0,
                        description="Jobs not released yet, as the broker counts them; 0 once the task has "
                        "ended; null in task lists (the broker is not asked) or when the broker did not "
                        "answer.",
                    )
                ),
            },
            description="A fed task's feed: at most `parallel` of its jobs are queued or running at once.",
        ),
        "FeedChange": _obj(
            _feed_fields(),
            optional=FEED_FIELDS,
            minProperties=1,
            description="The settings to change (at least one); the others stay as they are.",
        ),
        "Job": job,
        "Jobs": _obj({"jobs": _array(_ref("Job"))}, description="Submittable jobs, by name."),
        "JobStop": _obj(
            {
                "jid": _string(),
                "state": _string(
                    enum=["stopped", "stopping"],
                    description="`stopped`: in the stopped set, it does not run until resumed; `stopping`: "
                    "its worker parks it at its next checkpoint (or a worker parks it when it takes it).",
                ),
            }
        ),
        "JobResume": _obj(
            {
                "jid": _string(),
                "state": _string(const="enqueued"),
                "queue": _string(description="The queue it went back to."),
            }
        ),
        "Health": _obj({"status": _string(const="ok")}),
        "Ready": _obj(
            {
                "status": _string(const="ready"),
                "checks": _obj({"broker": _string(const="ok"), "database": _string(const="ok")}),
            }
        ),
        "TaskSubmission": submission,
        "TaskUpload": upload,
        "BusyKey": _obj(
            {
                "key": _string(minLength=1, description="The key, as the task's `concurrency_key` gave it."),
                "limit": _integer(1, description="How many of its jobs may hold slots at once."),
                "holding": _integer(0, description="How many of its jobs hold slots."),
                "holders": _array(
                    _string(),
                    maxItems=MAX_HOLDERS,
                    description=f"The jids holding slots (queued to run, running, or awaiting a retry), "
                    f"the first {MAX_HOLDERS}.",
                ),
                "waiting": _integer(0, description="How many of its jobs wait for a slot."),
            },
            description="A concurrency key with jobs holding or waiting for its slots.",
        ),
        "BusyKeys": _obj(
            {"items": _array(_ref("BusyKey"), maxItems=MAX_KEYS)},
            description="Busy keys, those with most jobs waiting first.",
        ),
        "Schedule": _obj(
            {
                "name": _string(minLength=1),
                "job": _string(description="The job each tick enqueues."),
                "cron": _string(
                    description="Five fields (minute, hour, day of month, month, day of week), or six "
                    "with a leading seconds field."
                ),
                "tz": _string(description="The time zone the cron expression is read in (IANA name)."),
                "queue": _string(description="The queue its jobs go to."),
                "catch_up": _string(
                    description="What a worker enqueues of the ticks missed while every worker was down: "
                    "`latest`, `all` or `none`."
                ),
                "paused": {
                    "type": "boolean",
                    "description": "Its ticks pass without a job until it is resumed.",
                },
                "next_run": _time(
                    "Its next tick (also while paused); null if its cron expression or time zone cannot "
                    "be read, or it has no tick within a year."
                ),
                "last_run": _time(
                    "The last tick it passed, enqueued or not (paused, not caught up); for a schedule "
                    "that has not ticked since it was first declared, its latest tick before that."
                ),
                "last_jid": _nullable(_string(description="The jid of the last job it enqueued.")),
                "last_enqueued_at": _time("When its last job was enqueued."),
            },
            description="A periodic schedule, as the workers declared it to the broker.",
        ),
        "Schedules": _obj(
            {"schedules": _array(_ref("Schedule"))},
            description="The periodic schedules, by name.",
        ),
        "Queue": _obj(_queue_fields(), description="A queue of the broker."),
        "Queues": _obj(
            {"queues": _array(_ref("Queue"))},
            description="Every queue the broker knows, by name: those with jobs, and the paused ones.",
        ),
        "ClearedQueue": _obj(
            {**_queue_fields(), "cleared": _integer(0, description="How many waiting jobs were deleted.")},
            description="The queue after it was cleared.",
        ),
    }


def _queue_fields() -> dict[str, Schema]:
    return {
        "name": _string(minLength=1),
        "size": _integer(0, description="Jobs waiting in it (not those running)."),
        "latency": {
            "type": "number",
            "minimum": 0,
            "description": "Seconds its oldest waiting job has waited; 0 when it is empty.",
        },
        "paused": {
            "type": "boolean",
            "description": "No worker takes its jobs until it is resumed; pushes still land in it.",
        },
    }


#: The flow-control options of a task.
#: What each option that tunes another needs, as JSON Schema's ``dependentRequired``.
_NEEDS = {name: [needed] for name, needed in TaskOptions.needs().items()}
#: The API's own limits on task options, said after the option's description.
_API_LIMITS = {"chunk_size": "at most ASYNCTASK_API_MAX_CHUNK_SIZE (1000)"}


def _task_options(*, as_text: bool) -> dict[str, Schema]:
    """The task options a request may give (``TaskOptions``): as JSON values, or as query and
    form fields (text: an object option is JSON text)."""
    options: dict[str, Schema] = {}
    for name, schema in TaskOptions.request_schema().items():
        if name in _API_LIMITS:
            schema["description"] = f"{schema['description'].rstrip('.')}; {_API_LIMITS[name]}."
        if schema["type"] == "object" and as_text:
            schema = _json_text(f"{schema['description']} A JSON object, as text.")
        elif name in TaskOptions.nullable() and not as_text:
            schema = _nullable(schema)
        options[name] = schema
    return options


def _feed_fields() -> dict[str, Schema]:
    schemas = TaskOptions.request_schema()
    return {name: schemas[name] for name in FEED_FIELDS}


def _json_text(description: str) -> Schema:
    return _string(contentMediaType=JSON, contentSchema={"type": "object"}, description=description)


# --- paths ---------------------------------------------------------------------------------------


#: Where the query options of ``POST /api/tasks`` apply.
CSV_ONLY = " (text/csv and NDJSON bodies only; refused with other bodies)."


def _paths() -> dict[str, Any]:
    task_id = _ref("TaskId", "parameters")
    jid = _ref("Jid", "parameters")
    job_not_found = _response(
        "`job_not_found`: no such job, or not one of this token's tenant's tasks' jobs.", _ref("Error")
    )
    ndjson = _string(description=f"The file itself, e.g.\n\n{EXAMPLE_NDJSON}")
    return {
        "/api/tasks": {
            "get": _operation(
                "listTasks",
                "The caller's tasks, newest first",
                "tasks",
                {
                    "200": _response("A page of tasks (their `errors` are empty).", _ref("TaskPage")),
                    **_errors(422),
                },
                parameters=[
                    _query("before", _string(pattern=TASK_CURSOR), "The `next` cursor of the previous page."),
                    _query("limit", _integer(1, MAX_PAGE, default=50), "Tasks per page."),
                ],
                description=(
                    "`before` is opaque: the `next` of a previous page, or 422 `invalid_cursor`. "
                    "A bad `limit` is 422 `invalid_request`."
                ),
            ),
            "post": _operation(
                "createTask",
                "Create a task: one job per chunk of items",
                "tasks",
                {
                    "202": _response(
                        "Created and enqueued.",
                        _ref("CreatedTask"),
                        Location=_ref("Location", "headers"),
                    ),
                    **_errors(400, 413, 415, 422, 503),
                },
                parameters=[
                    _query(
                        "job",
                        _string(minLength=1),
                        f"The job{CSV_ONLY}",
                    ),
                    *(
                        _query(name, schema, f"{schema['description']}{CSV_ONLY}")
                        for name, schema in _task_options(as_text=True).items()
                    ),
                ],
                request_body={
                    "required": True,
                    "description": (
                        "The items. A JSON body names the job and options in the body; a CSV or "
                        "NDJSON body in the query string; an upload in form fields. Query options "
                        "with a JSON body or an upload are refused (422 `invalid_request`). CSV: the first "
                        "row is the header and each row becomes an object of strings. NDJSON: one "
                        "JSON value per line, blank lines skipped. No string in the items or meta may "
                        "hold U+0000 or a lone surrogate (422 `invalid_string`), and every number must "
                        "be finite (no NaN, Infinity or 1e999: 422 `invalid_number`). If any item is "
                        "wrong nothing is created (422 `validation_failed` lists the first 20 errors "
                        "in `details.errors`: the item's index, the JSON pointer `path` inside it and "
                        "the `message`; in a CSV or NDJSON body also the `line` the item starts on, "
                        "and in a CSV body the `column`)."
                    ),
                    "content": {
                        JSON: {
                            "schema": _ref("TaskSubmission"),
                            "example": {"job": "import_products", "items": EXAMPLE_ITEMS, "chunk_size": 10},
                        },
                        # Examples in the descriptions: tools take a text example for the body.
                        "text/csv": {
                            "schema": _string(description=f"The file itself, e.g.\n\n{EXAMPLE_CSV}")
                        },
                        "application/x-ndjson": {"schema": ndjson},
                        "application/jsonl": {"schema": ndjson},
                        "multipart/form-data": {
                            "schema": _ref("TaskUpload"),
                            "encoding": {
                                "file": {"contentType": "text/csv, application/x-ndjson, application/json"}
                            },
                        },
                    },
                },
                description=(
                    "422 codes: `invalid_request` (`details.field`), `unknown_job`, "
                    "`chunk_size_too_large`, `json_too_deep`, `invalid_number`, `invalid_string`, "
                    "`no_items`, `blank_lines` (a run of blank lines over `max_item_bytes`: `details.line`), "
                    "`validation_failed`, `invalid_concurrency_key` (a template naming anything but item "
                    "fields), `concurrency_key_unresolved` (an item gives no key: "
                    "`details.item`, `details.key_field`, and `details.line` in CSV and NDJSON). "
                    "`interval` or `priority` without `parallel` is `invalid_request`."
                ),
            ),
        },
        "/api/tasks/{task_id}": {
            "parameters": [task_id],
            "get": _operation(
                "getTask",
                "A task's progress and first errors",
                "tasks",
                {"200": _response("The task.", _ref("Task")), **_errors(404, 422)},
                parameters=[
                    _query(
                        "errors",
                        _integer(0, MAX_ERRORS, default=DEFAULT_ERRORS),
                        "How many of the first failed/error events to include.",
                    )
                ],
            ),
            "patch": _operation(
                "updateTask",
                "Change a fed task's parallel, interval or priority while it runs",
                "tasks",
                {
                    "200": _response("The task with its feed as changed.", _ref("Task")),
                    **_errors(400, 404, 409, 413, 415, 422),
                },
                request_body={
                    "required": True,
                    "content": {JSON: {"schema": _ref("FeedChange"), "example": {"parallel": 10}}},
                },
                description=(
                    "A change takes effect within a second (or one interval): a higher `parallel` releases "
                    "jobs at once, a lower one as running jobs end (released jobs are not pulled back). "
                    "422 `invalid_request` names the field (`details.field`) of a value out of range or of "
                    "the wrong type, or of an unknown field; 409 `task_not_fed` or `task_ended`."
                ),
            ),
        },
        "/api/tasks/{task_id}/pause": {
            "parameters": [task_id],
            "post": _operation(
                "pauseTask",
                "Release no more of a fed task's jobs (those released go on)",
                "tasks",
                {
                    "200": _response("The task, paused (again 200 if it was).", _ref("Task")),
                    **_errors(404, 409),
                },
            ),
        },
        "/api/tasks/{task_id}/resume": {
            "parameters": [task_id],
            "post": _operation(
                "resumeTask",
                "Release a paused fed task's jobs again",
                "tasks",
                {
                    "200": _response("The task, resumed (again 200 if it was not paused).", _ref("Task")),
                    **_errors(404, 409),
                },
            ),
        },
        "/api/tasks/{task_id}/events": {
            "parameters": [task_id],
            "get": _operation(
                "listTaskEvents",
                "A task's events (one per job), oldest first",
                "tasks",
                {"200": _response("A page of events.", _ref("EventPage")), **_errors(404, 422)},
                parameters=[
                    _query(
                        "status", _string(enum=[s.value for s in EventStatus]), "Only events in this status."
                    ),
                    _query("after", _string(pattern=EVENT_CURSOR), "The `next` cursor of the previous page."),
                    _query("limit", _integer(1, MAX_PAGE, default=100), "Events per page."),
                ],
                description=(
                    "422 `invalid_cursor` for a bad `after`, `invalid_request` for another bad parameter."
                ),
            ),
        },
        "/api/tasks/{task_id}/items": {
            "parameters": [task_id],
            "get": _operation(
                "listTaskItems",
                "The items that failed in a task's jobs, in the task's order",
                "tasks",
                {"200": _response("A page of failed items.", _ref("FailedItemPage")), **_errors(404, 422)},
                parameters=[
                    _query(
                        "status",
                        _string(enum=["failed"], default="failed"),
                        "Which items: `failed` (items that ended well are counted in the task's `items`).",
                    ),
                    _query("after", _string(pattern=ITEM_CURSOR), "The `next` cursor of the previous page."),
                    _query("limit", _integer(1, MAX_PAGE, default=100), "Items per page."),
                ],
                description=(
                    "Items run one by one (`asynctask.each`) that raised `JobFailed`. "
                    "422 `invalid_cursor` for a bad `after`, `invalid_request` for another bad parameter."
                ),
            ),
        },
        "/api/tasks/{task_id}/stream": {
            "parameters": [task_id],
            "get": _operation(
                "streamTask",
                "Follow a task live (Server-Sent Events)",
                "tasks",
                {
                    "200": {
                        "description": (
                            "`event: progress` with the task's snapshot (`TaskSnapshot`) on connect "
                            "and on every change; `event: end` with the last snapshot once the task is "
                            "done, then the response ends. `: keepalive` comments every 15 s. A stream "
                            "also ends after `stream_max_seconds` without `end`: reconnect to go on."
                        ),
                        "content": {"text/event-stream": {"schema": _ref("StreamEvent")}},
                    },
                    **_errors(404, 422, 429),
                },
                parameters=[
                    _query(
                        "errors",
                        _integer(0, MAX_ERRORS, default=DEFAULT_ERRORS),
                        "How many of the first failed/error jobs the snapshots include, as summaries "
                        "(`ErrorSummary`; the events list has them whole). They are sent in the first "
                        "snapshot, in `end`, and in between only when they change.",
                    )
                ],
                description="A bad `errors` is 422 `invalid_request`.",
            ),
        },
        "/api/tasks/{task_id}/cancel": {
            "parameters": [task_id],
            "post": _operation(
                "cancelTask",
                "Cancel the task's jobs that have not started, stopped ones included",
                "tasks",
                {
                    "200": _response(
                        "The task after cancelling (again 200 if it was cancelled).", _ref("Task")
                    ),
                    **_errors(404, 409, 503),
                },
            ),
        },
        "/api/tasks/{task_id}/retry": {
            "parameters": [task_id],
            "post": _operation(
                "retryTask",
                "Enqueue the task's failed and error jobs again",
                "tasks",
                {"202": _response("Retried.", _ref("RetryResult")), **_errors(404, 409, 503)},
            ),
        },
        "/api/jobs": {
            "get": _operation(
                "listJobs",
                "The jobs a caller may submit",
                "jobs",
                {"200": _response("The jobs.", _ref("Jobs"))},
            ),
        },
        "/api/jobs/{jid}/stop": {
            "parameters": [jid],
            "post": _operation(
                "stopJob",
                "Stop a resumable job of the caller's tasks, keeping its checkpoint",
                "jobs",
                {
                    "200": _response("Stopped: it waited, and was parked without running.", _ref("JobStop")),
                    "202": _response("Stopping: it runs, and parks at its next checkpoint.", _ref("JobStop")),
                    "404": job_not_found,
                    "409": _response(
                        "`job_not_resumable` (the job is not a generator) or `job_ended` (it finished, "
                        "failed or was cancelled).",
                        _ref("Error"),
                    ),
                },
                description="A second stop answers the same and never changes the stored checkpoint. The "
                'stopped job\'s event becomes `stopped` ("stopped at <cursor>").',
            ),
        },
        "/api/jobs/{jid}/resume": {
            "parameters": [jid],
            "post": _operation(
                "resumeJob",
                "Send a stopped job back to its queue, to continue from its checkpoint",
                "jobs",
                {
                    "200": _response("Back in its queue.", _ref("JobResume")),
                    "404": job_not_found,
                    "409": _response(
                        "`job_not_stopped`: the job is running, waiting or still stopping.", _ref("Error")
                    ),
                },
            ),
        },
        "/api/keys": {
            "get": _operation(
                "listBusyKeys",
                "The caller's concurrency keys whose jobs run or wait",
                "keys",
                {"200": _response("The busy keys.", _ref("BusyKeys")), **_errors(422)},
                parameters=[_query("limit", _integer(1, MAX_KEYS, default=DEFAULT_KEYS), "Keys at most.")],
                description="A tenant sees its own keys only, as its tasks named them. A bad `limit` is 422 "
                "`invalid_request`.",
            ),
        },
        "/api/periodic": {
            "get": _operation(
                "listSchedules",
                "The deployment's periodic schedules",
                "periodic",
                {"200": _response("The schedules.", _ref("Schedules")), **_errors(403)},
                description="For an operator's token only (`asynctask tokens create --operator`, or any "
                "token of a tenant of `ASYNCTASK_API_OPERATOR_TENANTS`): any other is refused with 403 "
                "`operator_only`. The schedules are those the workers declare "
                f"(one no worker declares any more is forgotten {FORGET_AFTER:g} s later); times are UTC.",
            ),
        },
        "/api/queues": {
            "get": _operation(
                "listQueues",
                "The broker's queues, with their sizes, latencies and whether they are paused",
                "queues",
                {"200": _response("The queues.", _ref("Queues")), **_errors(403)},
                description="For an operator's token only, as `/api/periodic`.",
            ),
        },
        **{
            f"/api/queues/{{name}}/{action}": {
                "parameters": [_ref("QueueName", "parameters")],
                "post": _operation(
                    f"{action}Queue",
                    summary,
                    "queues",
                    {"200": _response(answer, _ref(schema)), **_errors(403, 422)},
                    description=f"For an operator's token only, as `/api/periodic`. {more}A name that is "
                    "not 1 to 255 printable ASCII characters other than `/` is 422 `invalid_queue`.",
                ),
            }
            for action, summary, answer, schema, more in (
                (
                    "pause",
                    "Pause a queue: no worker takes its jobs until it is resumed",
                    "The queue, paused (again 200 if it was).",
                    "Queue",
                    "Every worker process sees it at its next claim (within about a second when idle); "
                    "jobs already running go on, and pushes still land in the queue. A queue with no "
                    "jobs, or not known yet, can be paused. ",
                ),
                (
                    "resume",
                    "Resume a paused queue: workers take its jobs again",
                    "The queue, resumed (again 200 if it was not paused).",
                    "Queue",
                    "Idle workers see it within about a second. ",
                ),
                (
                    "clear",
                    "Delete every job waiting in a queue",
                    "The queue after it was cleared, and how many jobs were deleted.",
                    "ClearedQueue",
                    "Running jobs are not touched; a paused queue stays paused. ",
                ),
            )
        },
        "/metrics": {
            "get": _operation(
                "metrics",
                "The broker's state in Prometheus' text format",
                "operations",
                {
                    "200": {
                        "description": "The metrics (text format 0.0.4).",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors(403),
                },
                description="For an operator's token only, as `/api/periodic`. Queues' sizes and "
                "latencies, the scheduled, retry and dead sets' sizes, processed and failed totals, live "
                "processes with their busy threads, and on Redis the tracking backlog; read at each "
                "scrape, at a cost that does not grow with the number of jobs.",
            ),
        },
        "/healthz": {
            "get": _operation(
                "healthz",
                "The process answers",
                "service",
                {"200": _response("Alive.", _ref("Health"))},
                secured=False,
            ),
        },
        "/readyz": {
            "get": _operation(
                "readyz",
                "Redis and the database answer",
                "service",
                {
                    "200": _response("Ready.", _ref("Ready")),
                    "503": _response(
                        "`unavailable`; `details.checks` says which service failed.", _ref("Error")
                    ),
                },
                secured=False,
            ),
        },
        "/openapi.json": {
            "get": _operation(
                "openapi",
                "This document",
                "service",
                {"200": _response("OpenAPI 3.1.", {"type": "object"})},
                secured=False,
            ),
        },
        "/": {
            "get": _operation(
                "page",
                "The example page",
                "service",
                {"200": {"description": "HTML.", "content": {"text/html": {"schema": _string()}}}},
                secured=False,
            ),
        },
    }
