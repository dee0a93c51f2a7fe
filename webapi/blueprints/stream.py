"""``GET /api/tasks/<id>/stream``: Server-Sent Events with the task's snapshot on every change."""

from __future__ import annotations

from collections.abc import Iterator

from flask import Blueprint, Response

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
    first = task_or_404(task_id, 10)
    # The tenant check is done; the stream reads through the shared watcher, not this connection.
    release_db()
    watcher = resources().watcher
    return Response(
        _events(watcher, first),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _events(watcher: TaskWatcher, first: TaskView) -> Iterator[str]:
    with watcher.watching(first) as wait:
        yield f"retry: {RECONNECT_MS}\n\n"
        sent = 0
        while True:
            snapshot = wait(sent, KEEPALIVE)
            if snapshot.version == sent:
                yield ": keepalive\n\n"
                continue
            sent = snapshot.version
            if snapshot.settled:
                yield f"event: end\ndata: {snapshot.body}\n\n"
                return
            yield f"event: progress\ndata: {snapshot.body}\n\n"
