"""The OpenAPI document's paths: every route the app serves, with its parameters and bodies."""

from __future__ import annotations

from typing import Any

from asynctask.brokers.periodic import FORGET_AFTER
from asynctask.tracking.queries import MAX_PAGE
from asynctask.tracking.status import EventStatus
from webapi.blueprints.keys import DEFAULT_KEYS
from webapi.blueprints.tasks import DEFAULT_ERRORS, MAX_ERRORS
from webapi.bodies import EVENT_CURSOR, ITEM_CURSOR, MAX_KEYS, TASK_CURSOR
from webapi.openapi.builders import (
    EXAMPLE_CSV,
    EXAMPLE_ITEMS,
    EXAMPLE_NDJSON,
    JSON,
    errors,
    integer,
    operation,
    query_param,
    ref,
    response,
    string,
)
from webapi.openapi.components import task_options

#: Where the query options of ``POST /api/tasks`` apply.
CSV_ONLY = " (text/csv and NDJSON bodies only; refused with other bodies)."


def paths() -> dict[str, Any]:
    task_id = ref("TaskId", "parameters")
    jid = ref("Jid", "parameters")
    job_not_found = response(
        "`job_not_found`: no such job, or not one of this token's tenant's tasks' jobs.", ref("Error")
    )
    ndjson = string(description=f"The file itself, e.g.\n\n{EXAMPLE_NDJSON}")
    return {
        "/api/tasks": {
            "get": operation(
                "listTasks",
                "The caller's tasks, newest first",
                "tasks",
                {
                    "200": response("A page of tasks (their `errors` are empty).", ref("TaskPage")),
                    **errors(422),
                },
                parameters=[
                    query_param(
                        "before", string(pattern=TASK_CURSOR), "The `next` cursor of the previous page."
                    ),
                    query_param("limit", integer(1, MAX_PAGE, default=50), "Tasks per page."),
                ],
                description=(
                    "`before` is opaque: the `next` of a previous page, or 422 `invalid_cursor`. "
                    "A bad `limit` is 422 `invalid_request`."
                ),
            ),
            "post": operation(
                "createTask",
                "Create a task: one job per chunk of items",
                "tasks",
                {
                    "202": response(
                        "Created and enqueued.",
                        ref("CreatedTask"),
                        Location=ref("Location", "headers"),
                    ),
                    **errors(400, 413, 415, 422, 503),
                },
                parameters=[
                    query_param(
                        "job",
                        string(minLength=1),
                        f"The job{CSV_ONLY}",
                    ),
                    *(
                        query_param(name, schema, f"{schema['description']}{CSV_ONLY}")
                        for name, schema in task_options(as_text=True).items()
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
                            "schema": ref("TaskSubmission"),
                            "example": {"job": "import_products", "items": EXAMPLE_ITEMS, "chunk_size": 10},
                        },
                        # Examples in the descriptions: tools take a text example for the body.
                        "text/csv": {"schema": string(description=f"The file itself, e.g.\n\n{EXAMPLE_CSV}")},
                        "application/x-ndjson": {"schema": ndjson},
                        "application/jsonl": {"schema": ndjson},
                        "multipart/form-data": {
                            "schema": ref("TaskUpload"),
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
            "get": operation(
                "getTask",
                "A task's progress and first errors",
                "tasks",
                {"200": response("The task.", ref("Task")), **errors(404, 422)},
                parameters=[
                    query_param(
                        "errors",
                        integer(0, MAX_ERRORS, default=DEFAULT_ERRORS),
                        "How many of the first failed/error events to include.",
                    )
                ],
            ),
            "patch": operation(
                "updateTask",
                "Change a fed task's parallel, interval or priority while it runs",
                "tasks",
                {
                    "200": response("The task with its feed as changed.", ref("Task")),
                    **errors(400, 404, 409, 413, 415, 422),
                },
                request_body={
                    "required": True,
                    "content": {JSON: {"schema": ref("FeedChange"), "example": {"parallel": 10}}},
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
            "post": operation(
                "pauseTask",
                "Release no more of a fed task's jobs (those released go on)",
                "tasks",
                {
                    "200": response("The task, paused (again 200 if it was).", ref("Task")),
                    **errors(404, 409),
                },
            ),
        },
        "/api/tasks/{task_id}/resume": {
            "parameters": [task_id],
            "post": operation(
                "resumeTask",
                "Release a paused fed task's jobs again",
                "tasks",
                {
                    "200": response("The task, resumed (again 200 if it was not paused).", ref("Task")),
                    **errors(404, 409),
                },
            ),
        },
        "/api/tasks/{task_id}/events": {
            "parameters": [task_id],
            "get": operation(
                "listTaskEvents",
                "A task's events (one per job), oldest first",
                "tasks",
                {"200": response("A page of events.", ref("EventPage")), **errors(404, 422)},
                parameters=[
                    query_param(
                        "status", string(enum=[s.value for s in EventStatus]), "Only events in this status."
                    ),
                    query_param(
                        "after", string(pattern=EVENT_CURSOR), "The `next` cursor of the previous page."
                    ),
                    query_param("limit", integer(1, MAX_PAGE, default=100), "Events per page."),
                ],
                description=(
                    "422 `invalid_cursor` for a bad `after`, `invalid_request` for another bad parameter."
                ),
            ),
        },
        "/api/tasks/{task_id}/items": {
            "parameters": [task_id],
            "get": operation(
                "listTaskItems",
                "The items that failed in a task's jobs, in the task's order",
                "tasks",
                {"200": response("A page of failed items.", ref("FailedItemPage")), **errors(404, 422)},
                parameters=[
                    query_param(
                        "status",
                        string(enum=["failed"], default="failed"),
                        "Which items: `failed` (items that ended well are counted in the task's `items`).",
                    ),
                    query_param(
                        "after", string(pattern=ITEM_CURSOR), "The `next` cursor of the previous page."
                    ),
                    query_param("limit", integer(1, MAX_PAGE, default=100), "Items per page."),
                ],
                description=(
                    "Items run one by one (`asynctask.each`) that raised `JobFailed`. "
                    "422 `invalid_cursor` for a bad `after`, `invalid_request` for another bad parameter."
                ),
            ),
        },
        "/api/tasks/{task_id}/stream": {
            "parameters": [task_id],
            "get": operation(
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
                        "content": {"text/event-stream": {"schema": ref("StreamEvent")}},
                    },
                    **errors(404, 422, 429),
                },
                parameters=[
                    query_param(
                        "errors",
                        integer(0, MAX_ERRORS, default=DEFAULT_ERRORS),
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
            "post": operation(
                "cancelTask",
                "Cancel the task's jobs that have not started, stopped ones included",
                "tasks",
                {
                    "200": response(
                        "The task after cancelling (again 200 if it was cancelled).", ref("Task")
                    ),
                    **errors(404, 409, 503),
                },
            ),
        },
        "/api/tasks/{task_id}/retry": {
            "parameters": [task_id],
            "post": operation(
                "retryTask",
                "Enqueue the task's failed and error jobs again",
                "tasks",
                {"202": response("Retried.", ref("RetryResult")), **errors(404, 409, 503)},
            ),
        },
        "/api/jobs": {
            "get": operation(
                "listJobs",
                "The jobs a caller may submit",
                "jobs",
                {"200": response("The jobs.", ref("Jobs"))},
            ),
        },
        "/api/jobs/{jid}/stop": {
            "parameters": [jid],
            "post": operation(
                "stopJob",
                "Stop a resumable job of the caller's tasks, keeping its checkpoint",
                "jobs",
                {
                    "200": response("Stopped: it waited, and was parked without running.", ref("JobStop")),
                    "202": response("Stopping: it runs, and parks at its next checkpoint.", ref("JobStop")),
                    "404": job_not_found,
                    "409": response(
                        "`job_not_resumable` (the job is not a generator) or `job_ended` (it finished, "
                        "failed or was cancelled).",
                        ref("Error"),
                    ),
                },
                description="A second stop answers the same and never changes the stored checkpoint. The "
                'stopped job\'s event becomes `stopped` ("stopped at <cursor>").',
            ),
        },
        "/api/jobs/{jid}/resume": {
            "parameters": [jid],
            "post": operation(
                "resumeJob",
                "Send a stopped job back to its queue, to continue from its checkpoint",
                "jobs",
                {
                    "200": response("Back in its queue.", ref("JobResume")),
                    "404": job_not_found,
                    "409": response(
                        "`job_not_stopped`: the job is running, waiting or still stopping.", ref("Error")
                    ),
                },
            ),
        },
        "/api/keys": {
            "get": operation(
                "listBusyKeys",
                "The caller's concurrency keys whose jobs run or wait",
                "keys",
                {"200": response("The busy keys.", ref("BusyKeys")), **errors(422)},
                parameters=[
                    query_param("limit", integer(1, MAX_KEYS, default=DEFAULT_KEYS), "Keys at most.")
                ],
                description="A tenant sees its own keys only, as its tasks named them. A bad `limit` is 422 "
                "`invalid_request`.",
            ),
        },
        "/api/periodic": {
            "get": operation(
                "listSchedules",
                "The deployment's periodic schedules",
                "periodic",
                {"200": response("The schedules.", ref("Schedules")), **errors(403)},
                description="For an operator's token only (`asynctask tokens create --operator`, or any "
                "token of a tenant of `ASYNCTASK_API_OPERATOR_TENANTS`): any other is refused with 403 "
                "`operator_only`. The schedules are those the workers declare "
                f"(one no worker declares any more is forgotten {FORGET_AFTER:g} s later); times are UTC.",
            ),
        },
        "/api/queues": {
            "get": operation(
                "listQueues",
                "The broker's queues, with their sizes, latencies and whether they are paused",
                "queues",
                {"200": response("The queues.", ref("Queues")), **errors(403)},
                description="For an operator's token only, as `/api/periodic`.",
            ),
        },
        **{
            f"/api/queues/{{name}}/{action}": {
                "parameters": [ref("QueueName", "parameters")],
                "post": operation(
                    f"{action}Queue",
                    summary,
                    "queues",
                    {"200": response(answer, ref(schema)), **errors(403, 422)},
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
            "get": operation(
                "metrics",
                "The broker's state in Prometheus' text format",
                "operations",
                {
                    "200": {
                        "description": "The metrics (text format 0.0.4).",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **errors(403),
                },
                description="For an operator's token only, as `/api/periodic`. Queues' sizes and "
                "latencies, the scheduled, retry and dead sets' sizes, processed and failed totals, live "
                "processes with their busy threads, and on Redis the tracking backlog; read at each "
                "scrape, at a cost that does not grow with the number of jobs.",
            ),
        },
        "/healthz": {
            "get": operation(
                "healthz",
                "The process answers",
                "service",
                {"200": response("Alive.", ref("Health"))},
                secured=False,
            ),
        },
        "/readyz": {
            "get": operation(
                "readyz",
                "Redis and the database answer",
                "service",
                {
                    "200": response("Ready.", ref("Ready")),
                    "503": response(
                        "`unavailable`; `details.checks` says which service failed.", ref("Error")
                    ),
                },
                secured=False,
            ),
        },
        "/openapi.json": {
            "get": operation(
                "openapi",
                "This document",
                "service",
                {"200": response("OpenAPI 3.1.", {"type": "object"})},
                secured=False,
            ),
        },
        "/": {
            "get": operation(
                "page",
                "The example page",
                "service",
                {"200": {"description": "HTML.", "content": {"text/html": {"schema": string()}}}},
                secured=False,
            ),
        },
    }
