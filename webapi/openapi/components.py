"""The OpenAPI document's components: schemas, shared responses and parameters. A task's options
are described from ``TaskOptions``' own fields, so the document follows the code."""

from __future__ import annotations

from typing import Any

from asynctask.tasks.options import TaskOptions
from asynctask.tracking.status import UNDONE, EventStatus, TaskStatus
from webapi.blueprints.keys import MAX_HOLDERS, MAX_KEYS
from webapi.blueprints.queues import QUEUE_PATH_NAME
from webapi.feeds import FIELDS as FEED_FIELDS
from webapi.openapi.builders import (
    ERROR_RESPONSES,
    EVENT_CURSOR,
    ITEM_CURSOR,
    JSON,
    TASK_CURSOR,
    Schema,
    array,
    integer,
    obj,
    or_null,
    ref,
    response,
    string,
    timestamp,
)
from webapi.serialize import SUMMARY_ERROR_CHARS


def responses() -> dict[str, Any]:
    responses = {name: response(description, ref("Error")) for name, description in ERROR_RESPONSES.values()}
    responses["Unauthorized"]["headers"] = {"WWW-Authenticate": ref("WWW-Authenticate", "headers")}
    responses["TooManyStreams"]["headers"] = {"Retry-After": ref("Retry-After", "headers")}
    return responses


def parameters() -> dict[str, Any]:
    return {
        "TaskId": {
            "name": "task_id",
            "in": "path",
            "required": True,
            "description": "The task's id (`task_id` of the 202 that created it).",
            "schema": string(minLength=1),
        },
        "QueueName": {
            "name": "name",
            "in": "path",
            "required": True,
            "description": "The queue's name.",
            "schema": string(pattern=f"^{QUEUE_PATH_NAME.pattern}$"),
        },
        "Jid": {
            "name": "jid",
            "in": "path",
            "required": True,
            "description": "The job's jid (`job_id` of its event).",
            "schema": string(minLength=1),
        },
    }


def schemas() -> dict[str, Schema]:
    event_statuses = [s.value for s in EventStatus]
    urls = obj(
        {
            "self": string(format="uri-reference", description="`/api/tasks/{id}`"),
            "events": string(format="uri-reference", description="`/api/tasks/{id}/events`"),
            "items": string(format="uri-reference", description="`/api/tasks/{id}/items?status=failed`"),
            "stream": string(format="uri-reference", description="`/api/tasks/{id}/stream`"),
        },
        description="Where to read the task.",
    )
    counts = obj(
        {status: integer(0) for status in event_statuses},
        description="Jobs of the task per event status (`stopped`: resumable jobs stopped by `stop_job`, "
        "kept with their checkpoint until resumed).",
    )
    message = obj(
        {
            "at": timestamp("When it was written.", nullable=False),
            "status": string(description="The job's status then."),
            "text": string(),
        },
        description="One line of a job's message log.",
    )
    event = obj(
        {
            "id": integer(1, description="Also the cursor (`after`) of the events list."),
            "job_id": string(),
            "status": string(enum=event_statuses),
            "params": or_null(array({}, description="The job's arguments (here: one chunk of items).")),
            "attempt": integer(0),
            "error": or_null(string(description="The error message of a failed or error job.")),
            "error_class": or_null(string()),
            "progress": or_null(
                obj(
                    {"done": or_null(integer()), "total": or_null(integer())},
                    description="What the job last reported of its own progress.",
                )
            ),
            "items_run": or_null(
                obj(
                    {"done": integer(0), "failed": integer(0)},
                    description="Items of the job's chunk it ran one by one (`asynctask.each`) that ended "
                    "well and that failed, over every run; null for a job that did not.",
                )
            ),
            "enqueued_at": timestamp("When the job was last enqueued."),
            "started_at": timestamp("When the job last started."),
            "finished_at": timestamp("When the job last ended."),
            "updated_at": timestamp("The event's last change."),
            "messages": array(
                ref("Message"),
                description="The message log, oldest first: its latest 50 messages at most, each text "
                "cut (with `... (truncated, N bytes)`) when the answer's texts would pass its budget.",
            ),
            "earlier_messages": integer(0, description="Older messages of the log left out of `messages`."),
        },
        description="One job of a task (its tracking event).",
    )
    error_summary = obj(
        {
            "id": integer(
                1, description="The event's id: `/events?after=<id - 1>&limit=1` returns it whole."
            ),
            "job_id": string(),
            "status": string(enum=[status.value for status in UNDONE]),
            "attempt": integer(0),
            "error": or_null(
                string(
                    description=f"The error message, cut at {SUMMARY_ERROR_CHARS} characters (ending in …)."
                )
            ),
            "error_class": or_null(string()),
            "items": or_null(integer(0, description="Items in the job's chunk (its first argument).")),
        },
        description="A failed or error job in brief (a progress stream's errors): no parameters, no log.",
    )
    task_fields: dict[str, Schema] = {
        "id": string(),
        "job": string(description="The job's name."),
        "queue": string(),
        "runtime": string(
            enum=["asynctask", "celery", "rq", "dramatiq"],
            description="What runs the task's jobs: AsyncTask's own workers, or another runtime with "
            "tracking attached (see the guide's Celery, RQ and Dramatiq page).",
        ),
        "status": string(enum=[s.value for s in TaskStatus]),
        "total": integer(0, description="Jobs in the task."),
        "counts": ref("TaskCounts"),
        "done": integer(0, description="Jobs that will not run again."),
        "progress": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "Items run (done or failed) / `items.total` once any job ran its items one by "
            "one (`asynctask.each`), else `done` / `total`.",
        },
        "items": obj(
            {
                "total": integer(0, description="Items in all the task's chunks."),
                "done": integer(0, description="Items run one by one that ended well."),
                "failed": integer(
                    0, description="Items run one by one that failed (`/items?status=failed` lists them)."
                ),
            },
            description="The task's items (a task whose jobs run them one by one counts each).",
        ),
        "eta_seconds": or_null(
            {
                "type": "number",
                "minimum": 0,
                "description": "Seconds left at the rate the task's jobs have been ending at (since its "
                "first start, or since its feed last changed once `parallel` jobs have ended since); null "
                "before any job has ended, while the task is paused or only stopped jobs are left, and once "
                "it is not running.",
            }
        ),
        "ahead": or_null(
            {
                "type": "integer",
                "minimum": 0,
                "description": "About how many jobs of its queue start before the task's next one (fair "
                "share: a round of the tenants waiting, and its tenant's earlier jobs); null when none of "
                "its jobs waits in the queue, in task lists and in streams.",
            }
        ),
        "feed": or_null(ref("Feed")),
        "created_at": timestamp("When the task was created.", nullable=False),
        "started_at": timestamp("When its first job started."),
        "finished_at": timestamp("When its last job ended."),
        "cancelled_at": timestamp("When it was cancelled."),
        "meta": or_null({"type": "object", "description": "The `meta` given at creation."}),
        "urls": ref("Urls"),
    }
    task = obj(
        {
            **task_fields,
            "errors": array(
                ref("Event"),
                description="The first failed/error events (as many as `errors` asks; empty in lists).",
            ),
        },
        description="A task and its progress.",
    )
    snapshot = obj(
        {
            **task_fields,
            "errors": array(
                ref("ErrorSummary"),
                description="The first failed/error jobs (as many as the stream's `errors` asks), in the "
                "first snapshot, the last (`end`) and whenever they change; absent: unchanged.",
            ),
        },
        optional=("errors",),
        description="A task's snapshot in a progress stream.",
    )
    created = obj(
        {
            "task_id": string(),
            "job": string(),
            "items": integer(1, description="Items received."),
            "jobs": integer(
                1,
                description="Jobs enqueued: items / chunk_size, rounded up, or more with a "
                "concurrency_key (a chunk holds items of one key).",
            ),
            "chunk_size": integer(1),
            "status": string(enum=[s.value for s in TaskStatus]),
            "feed": or_null(ref("Feed")),
            "urls": ref("Urls"),
            "warnings": array(
                obj(
                    {
                        "code": string(
                            enum=["no_worker"],
                            description="`no_worker`: no live worker process listens to the task's queue.",
                        ),
                        "message": string(),
                    }
                ),
                description="What is worth knowing though the task was created (its jobs wait until a "
                "worker listens to their queue, say); empty when nothing is.",
            ),
        },
        description="The task just created.",
    )
    job = obj(
        {
            "name": string(),
            "queue": string(description="The job's default queue."),
            "description": or_null(string(description="The first line of the job's docstring.")),
            "schema": or_null({"type": "object", "description": "The JSON Schema one item must match."}),
        },
        description="A job the API may create tasks of.",
    )
    submission = obj(
        {
            "job": string(minLength=1, description="A job listed by `GET /api/jobs`."),
            "items": array(
                {},
                minItems=1,
                description="The items (each must match the job's item schema); at most "
                "ASYNCTASK_API_MAX_ITEMS (200000).",
            ),
            **task_options(as_text=False),
        },
        optional=TaskOptions.request_fields(),
        description="A task as JSON (nesting at most ASYNCTASK_API_MAX_JSON_DEPTH (32) levels).",
        dependentRequired=_NEEDS,
    )
    upload = obj(
        {
            "job": string(minLength=1),
            **task_options(as_text=True),
            "file": string(
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
        "Error": obj(
            {
                "error": obj(
                    {
                        "code": string(description="Stable; clients branch on it."),
                        "message": string(description="For people; may change."),
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
        "RetryResult": obj(
            {"retried": integer(0, description="Jobs enqueued again."), "task": ref("Task")},
            description="The outcome of a retry.",
        ),
        "TaskPage": obj(
            {
                "items": array(ref("Task")),
                "next": or_null(
                    string(pattern=TASK_CURSOR, description="Pass as `before` for the next page.")
                ),
            },
            description="Tasks, newest first.",
        ),
        "FailedItem": obj(
            {
                "id": integer(1),
                "job_id": string(description="The job whose chunk held it."),
                "position": integer(0, description="Its place in the job's chunk, from 0."),
                "item": {"description": "The item as given, or its JSON text cut when over 4 KB."},
                "message": string(description="Why it failed (the `JobFailed` message)."),
                "at": timestamp("When it failed.", nullable=False),
            },
            description="An item that failed in its job's chunk; the job went on with the next one.",
        ),
        "FailedItemPage": obj(
            {
                "items": array(ref("FailedItem")),
                "next": or_null(
                    string(pattern=ITEM_CURSOR, description="Pass as `after` for the next page.")
                ),
            },
            description="Failed items in the task's order of items: its jobs' order, then each item's "
            "place in its chunk.",
        ),
        "EventPage": obj(
            {
                "items": array(ref("Event")),
                "next": or_null(
                    string(pattern=EVENT_CURSOR, description="Pass as `after` for the next page.")
                ),
            },
            description="Events, oldest first.",
        ),
        "StreamEvent": obj(
            {
                "event": string(enum=["progress", "end"]),
                "data": string(
                    contentMediaType=JSON,
                    contentSchema=ref("TaskSnapshot"),
                    description="The task's snapshot (JSON on one line).",
                ),
                "id": string(),
                "retry": integer(0, description="Milliseconds to wait before reconnecting."),
            },
            optional=("id", "retry"),
            description="One Server-Sent Event of `GET /api/tasks/{task_id}/stream` (fields as parsed).",
        ),
        "Feed": obj(
            {
                **_feed_fields(),
                "paused": {"type": "boolean", "description": "No job is released until the task is resumed."},
                "held": or_null(
                    integer(
                        0,
                        description="Jobs not released yet, as the broker counts them; 0 once the task has "
                        "ended; null in task lists (the broker is not asked) or when the broker did not "
                        "answer.",
                    )
                ),
            },
            description="A fed task's feed: at most `parallel` of its jobs are queued or running at once.",
        ),
        "FeedChange": obj(
            _feed_fields(),
            optional=FEED_FIELDS,
            minProperties=1,
            description="The settings to change (at least one); the others stay as they are.",
        ),
        "Job": job,
        "Jobs": obj({"jobs": array(ref("Job"))}, description="Submittable jobs, by name."),
        "JobStop": obj(
            {
                "jid": string(),
                "state": string(
                    enum=["stopped", "stopping"],
                    description="`stopped`: in the stopped set, it does not run until resumed; `stopping`: "
                    "its worker parks it at its next checkpoint (or a worker parks it when it takes it).",
                ),
            }
        ),
        "JobResume": obj(
            {
                "jid": string(),
                "state": string(const="enqueued"),
                "queue": string(description="The queue it went back to."),
            }
        ),
        "Health": obj({"status": string(const="ok")}),
        "Ready": obj(
            {
                "status": string(const="ready"),
                "checks": obj({"broker": string(const="ok"), "database": string(const="ok")}),
            }
        ),
        "TaskSubmission": submission,
        "TaskUpload": upload,
        "BusyKey": obj(
            {
                "key": string(minLength=1, description="The key, as the task's `concurrency_key` gave it."),
                "limit": integer(1, description="How many of its jobs may hold slots at once."),
                "holding": integer(0, description="How many of its jobs hold slots."),
                "holders": array(
                    string(),
                    maxItems=MAX_HOLDERS,
                    description=f"The jids holding slots (queued to run, running, or awaiting a retry), "
                    f"the first {MAX_HOLDERS}.",
                ),
                "waiting": integer(0, description="How many of its jobs wait for a slot."),
            },
            description="A concurrency key with jobs holding or waiting for its slots.",
        ),
        "BusyKeys": obj(
            {"items": array(ref("BusyKey"), maxItems=MAX_KEYS)},
            description="Busy keys, those with most jobs waiting first.",
        ),
        "Schedule": obj(
            {
                "name": string(minLength=1),
                "job": string(description="The job each tick enqueues."),
                "cron": string(
                    description="Five fields (minute, hour, day of month, month, day of week), or six "
                    "with a leading seconds field."
                ),
                "tz": string(description="The time zone the cron expression is read in (IANA name)."),
                "queue": string(description="The queue its jobs go to."),
                "catch_up": string(
                    description="What a worker enqueues of the ticks missed while every worker was down: "
                    "`latest`, `all` or `none`."
                ),
                "paused": {
                    "type": "boolean",
                    "description": "Its ticks pass without a job until it is resumed.",
                },
                "next_run": timestamp(
                    "Its next tick (also while paused); null if its cron expression or time zone cannot "
                    "be read, or it has no tick within a year."
                ),
                "last_run": timestamp(
                    "The last tick it passed, enqueued or not (paused, not caught up); for a schedule "
                    "that has not ticked since it was first declared, its latest tick before that."
                ),
                "last_jid": or_null(string(description="The jid of the last job it enqueued.")),
                "last_enqueued_at": timestamp("When its last job was enqueued."),
            },
            description="A periodic schedule, as the workers declared it to the broker.",
        ),
        "Schedules": obj(
            {"schedules": array(ref("Schedule"))},
            description="The periodic schedules, by name.",
        ),
        "Queue": obj(_queue_fields(), description="A queue of the broker."),
        "Queues": obj(
            {"queues": array(ref("Queue"))},
            description="Every queue the broker knows, by name: those with jobs, and the paused ones.",
        ),
        "ClearedQueue": obj(
            {**_queue_fields(), "cleared": integer(0, description="How many waiting jobs were deleted.")},
            description="The queue after it was cleared.",
        ),
    }


def _queue_fields() -> dict[str, Schema]:
    return {
        "name": string(minLength=1),
        "size": integer(0, description="Jobs waiting in it (not those running)."),
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


def task_options(*, as_text: bool) -> dict[str, Schema]:
    """The task options a request may give (``TaskOptions``): as JSON values, or as query and
    form fields (text: an object option is JSON text)."""
    options: dict[str, Schema] = {}
    for name, schema in TaskOptions.request_schema().items():
        if name in _API_LIMITS:
            schema["description"] = f"{schema['description'].rstrip('.')}; {_API_LIMITS[name]}."
        if schema["type"] == "object" and as_text:
            schema = json_text(f"{schema['description']} A JSON object, as text.")
        elif name in TaskOptions.nullable() and not as_text:
            schema = or_null(schema)
        options[name] = schema
    return options


def _feed_fields() -> dict[str, Schema]:
    schemas = TaskOptions.request_schema()
    return {name: schemas[name] for name in FEED_FIELDS}


def json_text(description: str) -> Schema:
    return string(contentMediaType=JSON, contentSchema={"type": "object"}, description=description)
