"""The OpenAPI document's components: schemas, shared responses and parameters. The response
bodies are described from the typed models their code builds (``webapi.bodies``), a task's
options from ``TaskOptions``' own fields, so the document follows the code."""

from __future__ import annotations

from typing import Any

from asynctask.tasks.options import TaskOptions
from webapi import bodies
from webapi.blueprints.queues import QUEUE_PATH_NAME
from webapi.feeds import FIELDS as FEED_FIELDS
from webapi.formats import TaskSubmission
from webapi.intake import TaskUpload
from webapi.openapi.builders import (
    ERROR_RESPONSES,
    JSON,
    Schema,
    obj,
    or_null,
    ref,
    response,
    string,
)
from webapi.typeschema import component_schemas, object_schema


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


#: The bodies the document names, each described from its typed model (``webapi.bodies``).
MODELS: tuple[type, ...] = (
    bodies.Error,
    bodies.Urls,
    bodies.TaskCounts,
    bodies.Message,
    bodies.Event,
    bodies.Task,
    bodies.ErrorSummary,
    bodies.TaskSnapshot,
    bodies.CreatedTask,
    bodies.RetryResult,
    bodies.TaskPage,
    bodies.FailedItem,
    bodies.FailedItemPage,
    bodies.EventPage,
    bodies.StreamEvent,
    bodies.Feed,
    bodies.Job,
    bodies.Jobs,
    bodies.JobStop,
    bodies.JobResume,
    bodies.Health,
    bodies.Ready,
    bodies.BusyKey,
    bodies.BusyKeys,
    bodies.Schedule,
    bodies.Schedules,
    bodies.Queue,
    bodies.Queues,
    bodies.ClearedQueue,
)


def schemas() -> dict[str, Schema]:
    return {
        **component_schemas(MODELS),
        "FeedChange": obj(
            _feed_fields(),
            optional=FEED_FIELDS,
            minProperties=1,
            description="The settings to change (at least one); the others stay as they are.",
        ),
        "TaskSubmission": _with_options(TaskSubmission, as_text=False),
        "TaskUpload": _with_options(TaskUpload, as_text=True),
    }


def _with_options(model: type, *, as_text: bool) -> Schema:
    """A request body: ``model``'s fields, and the task options, none of them required."""
    schema = object_schema(model)
    schema["properties"].update(task_options(as_text=as_text))
    schema["dependentRequired"] = _NEEDS
    return schema


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
        elif schema["type"] == "array" and as_text:
            content = {key: value for key, value in schema.items() if key != "description"}
            schema = json_text(f"{schema['description']} A JSON array, as text.", content)
        elif name in TaskOptions.nullable() and not as_text:
            schema = or_null(schema)
        options[name] = schema
    return options


def _feed_fields() -> dict[str, Schema]:
    schemas = TaskOptions.request_schema()
    return {name: schemas[name] for name in FEED_FIELDS}


def json_text(description: str, content: Schema | None = None) -> Schema:
    """A string holding JSON: an object unless ``content`` says what else."""
    shape = content if content is not None else {"type": "object"}
    return string(contentMediaType=JSON, contentSchema=shape, description=description)
