"""``GET /api/queues``: every queue with its size, latency and whether it is paused;
``POST /api/queues/<name>/pause``, ``/resume`` and ``/clear``: act on one, answering with the
queue as it is then.

The queues are the deployment's, shared by every tenant: only operators may see or touch them
(operators' tokens, and tokens of the operator tenants, ``operator_tenants``), as the periodic
schedules. A queue is named in the path: printable ASCII other than ``/`` (a name with other
characters is managed from the shell, ``asynctask queue``); any other name is refused with 422
``invalid_queue`` before the broker is asked anything.
"""

from __future__ import annotations

import re

from flask import Blueprint, Response

from asynctask.api import Queue
from asynctask.payload import MAX_QUEUE
from webapi import bodies
from webapi.auth import require_operator
from webapi.errors import ApiError
from webapi.resources import resources
from webapi.responses import json_response

queues = Blueprint("queues", __name__, url_prefix="/api/queues")

#: A queue name the API takes in its path: 1 to ``MAX_QUEUE`` printable ASCII characters but
#: ``/``, which would end the path's segment.
QUEUE_PATH_NAME = re.compile(f"[ -.0-~]{{1,{MAX_QUEUE}}}")


@queues.get("")
def index() -> Response:
    found = resources()
    require_operator(found.config.operator_tenants)
    listed = Queue.all_over(found.broker_context)
    body: bodies.Queues = {"queues": [queue_json(queue) for queue in listed]}
    return json_response(body)


@queues.post("/<name>/pause")
def pause(name: str) -> Response:
    queue = _queue(name)
    queue.pause()
    return json_response(queue_json(queue))


@queues.post("/<name>/resume")
def resume(name: str) -> Response:
    queue = _queue(name)
    queue.resume()
    return json_response(queue_json(queue))


@queues.post("/<name>/clear")
def clear(name: str) -> Response:
    queue = _queue(name)
    cleared = queue.clear()
    body: bodies.ClearedQueue = {**queue_json(queue), "cleared": cleared}
    return json_response(body)


def queue_json(queue: Queue) -> bodies.Queue:
    return {
        "name": queue.name,
        "size": queue.size,
        "latency": round(queue.latency, 3),
        "paused": queue.paused,
    }


def _queue(name: str) -> Queue:
    found = resources()
    require_operator(found.config.operator_tenants)
    if not QUEUE_PATH_NAME.fullmatch(name):
        raise ApiError(
            422,
            "invalid_queue",
            f"a queue name here is 1 to {MAX_QUEUE} printable ASCII characters other than /",
            {"field": "name"},
        )
    return Queue.over(found.broker_context, name)
