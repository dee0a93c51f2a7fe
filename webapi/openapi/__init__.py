"""The API described as OpenAPI 3.1 (served as ``GET /openapi.json``).

Built next to the code it describes: the JSON bodies from the typed models the code builds
(``webapi.bodies``), the task options from their definitions (``TaskOptions``);
``tests/webapi/test_openapi.py`` checks that it is a valid document and lists exactly the routes the
app serves, ``tests/webapi/test_bodies.py`` checks real answers of every JSON route against it, and
``tests/webapi/test_fuzz.py`` sends generated requests to the app and checks every response against it.
"""

from __future__ import annotations

from typing import Any

import asynctask
from webapi.openapi.builders import BEARER
from webapi.openapi.components import parameters, responses, schemas
from webapi.openapi.paths import paths


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
        "paths": paths(),
        "components": {
            "schemas": schemas(),
            "responses": responses(),
            "parameters": parameters(),
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
