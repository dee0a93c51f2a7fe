"""The pieces the OpenAPI document is built of: schema and operation builders, the shared error
responses, and the examples several parts name."""

from __future__ import annotations

import json
from typing import Any

Schema = dict[str, Any]

#: The content type of every JSON body, request or response.
JSON = "application/json"
BEARER = "bearer"

#: Items of the examples (a product import: the contract's running example).
EXAMPLE_ITEMS = [{"sku": "A1", "price": "9.99"}, {"sku": "B2", "price": "-1"}]
EXAMPLE_NDJSON = "".join(f"{json.dumps(item)}\n" for item in EXAMPLE_ITEMS)
EXAMPLE_CSV = "sku,price\n" + "".join(f"{item['sku']},{item['price']}\n" for item in EXAMPLE_ITEMS)


#: Shared error responses: status -> (component name, description).
ERROR_RESPONSES: dict[int, tuple[str, str]] = {
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


def ref(name: str, kind: str = "schemas") -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


def or_null(schema: Schema) -> Schema:
    """``schema`` or null, the 3.1 way (a type list; a ``$ref`` goes in ``anyOf``)."""
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def obj(properties: dict[str, Schema], *, optional: tuple[str, ...] = (), **extra: Any) -> Schema:
    """A closed object whose properties are all required unless listed in ``optional``."""
    return {
        "type": "object",
        "required": [name for name in properties if name not in optional],
        "properties": properties,
        "additionalProperties": False,
        **extra,
    }


def string(**extra: Any) -> Schema:
    return {"type": "string", **extra}


def integer(minimum: int | None = None, maximum: int | None = None, **extra: Any) -> Schema:
    schema: Schema = {"type": "integer", **extra}
    if minimum is not None:
        schema["minimum"] = minimum
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def json_content(schema: Schema) -> dict[str, Any]:
    return {JSON: {"schema": schema}}


def response(description: str, schema: Schema, **headers: Schema) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": json_content(schema)}
    if headers:
        response["headers"] = headers
    return response


def query_param(name: str, schema: Schema, description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def errors(*statuses: int) -> dict[str, Any]:
    """References to the shared error responses, by status."""
    return {str(status): ref(ERROR_RESPONSES[status][0], "responses") for status in statuses}


def operation(
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
        responses = {**responses, **errors(401, 503)}
    operation["responses"] = dict(sorted(responses.items()))
    operation["security"] = [{BEARER: []}] if secured else []
    return operation
