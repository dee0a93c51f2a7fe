"""``GET /api/tasks/<id>/stream``: Server-Sent Events with the task's snapshot on every change.

A stream holds a thread of the server: it takes one of the process's stream slots (or is
refused with 429 or 503 at once) and ends after ``stream_max_seconds``, when an ``EventSource``
reconnects by itself. A client that went away is noticed at the next keepalive.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from flask import Blueprint, Response, g

from asynctask.tracking.views import TaskView
from webapi.blueprints.tasks import task_or_404
from webapi.resources import release_db, resources
from webapi.watch import TaskWatcher

stream = Blueprint("stream", __name__, url_prefix="/api/tasks")

#: Seconds of silence before a comment line keeps proxies from closing the connection.
KEEPALIVE = 15.0
#: Milliseconds a browser's EventSource waits before it reconnects.
RECONNECT_MS = 2000


@stream.get("/<task_id>/stream")
def task_stream(task_id: str) -> Response:
    found = resources()
    release = found.streams.acquire(g.tenant)
    try:
        first = task_or_404(task_id, 10)
    except BaseException:
        release()
        raise
    # The tenant check is done; the stream reads through the shared watcher, not this connection.
    release_db()
    response = Response(
        _events(found.watcher, first, found.config.stream_max_seconds),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    # The server closes the response when the stream ends, fails or is never read (HEAD).
    response.call_on_close(release)
    return response


def _events(watcher: TaskWatcher, first: TaskView, lifetime: float) -> Iterator[str]:
    deadline = time.monotonic() + lifetime
    with watcher.watching(first) as wait:
        yield f"retry: {RECONNECT_MS}\n\n"
        sent = 0
        while (left := deadline - time.monotonic()) > 0:
            snapshot = wait(sent, min(KEEPALIVE, left))
            if snapshot.version == sent:
                yield ": keepalive\n\n"
                continue
            sent = snapshot.version
            if snapshot.settled:
                yield f"event: end\ndata: {snapshot.body}\n\n"
                return
            yield f"event: progress\ndata: {snapshot.body}\n\n"
