"""``GET /api/tasks/<id>/stream``: Server-Sent Events with the task's snapshot on every change.

A snapshot is small whatever the task: its errors (as ``?errors=`` asks, 10 by default) are
summaries without the jobs' parameters, sent in the first snapshot, again only when they
change, and in the last one (``end``); a snapshot without ``errors`` means "unchanged".

A stream holds a thread of the server: it takes one of the process's stream slots (or is
refused with 429 or 503 at once) and ends after ``stream_max_seconds``, when an ``EventSource``
reconnects by itself. A client that went away is noticed at the next keepalive.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import cast

from flask import Blueprint, Response

from asynctask.tasks.feedview import with_held
from asynctask.tracking.views import TaskView
from webapi import bodies
from webapi.auth import caller_tenant
from webapi.blueprints.tasks import errors_arg, task_or_404
from webapi.resources import release_db, resources
from webapi.serialize import error_summary, task_fields
from webapi.watch import Snapshot, TaskWatcher

stream = Blueprint("stream", __name__, url_prefix="/api/tasks")

#: Seconds of silence before a comment line keeps proxies from closing the connection.
KEEPALIVE = 15.0
#: Milliseconds a browser's EventSource waits before it reconnects.
RECONNECT_MS = 2000


@stream.get("/<task_id>/stream")
def task_stream(task_id: str) -> Response:
    errors = errors_arg()
    found = resources()
    release = found.streams.acquire(caller_tenant())
    try:
        first = with_held(task_or_404(task_id, errors), found.client)
    except BaseException:
        release()
        raise
    # The tenant check is done; the stream reads through the shared watcher, not this connection.
    release_db()
    response = Response(
        _events(found.watcher, first, errors, found.config.stream_max_seconds),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    # The server closes the response when the stream ends, fails or is never read (HEAD).
    response.call_on_close(release)
    return response


def _events(watcher: TaskWatcher, first: TaskView, errors: int, lifetime: float) -> Iterator[str]:
    deadline = time.monotonic() + lifetime
    frames = _Frames()
    with watcher.watching(first, errors) as wait:
        yield f"retry: {RECONNECT_MS}\n\n"
        sent = 0
        while (left := deadline - time.monotonic()) > 0:
            snapshot = wait(sent, min(KEEPALIVE, left))
            if snapshot.version == sent:
                yield ": keepalive\n\n"
                continue
            sent = snapshot.version
            body = frames.next(snapshot)
            if snapshot.settled:
                yield f"event: end\ndata: {body}\n\n"
                return
            if body is not None:
                yield f"event: progress\ndata: {body}\n\n"


class _Frames:
    """What one stream sends: the watcher's snapshots, their errors only when they changed."""

    def __init__(self) -> None:
        self.task: bodies.TaskFields | None = None
        self.listed: list[bodies.ErrorSummary] | None = None

    def next(self, snapshot: Snapshot) -> str | None:
        """The snapshot as one line of JSON, or None when nothing it shows changed (only what
        summaries leave out of a listed error did: its log, its times)."""
        task = task_fields(snapshot.view)
        listed = [error_summary(e) for e in snapshot.view.errors]
        # The ETA alone never makes a new snapshot (the watcher ignores it): nor does it here.
        without_eta: bodies.TaskFields = {**task, "eta_seconds": None}
        if without_eta == self.task and listed == self.listed and not snapshot.settled:
            return None
        self.task = without_eta
        # Without ``errors``, a snapshot's errors are unchanged; mypy cannot tell that ``task``
        # holds no such key.
        body = cast(bodies.TaskSnapshot, task)
        if listed != self.listed or snapshot.settled:
            body = {**task, "errors": listed}
            self.listed = listed
        # Compact, on one line, as a "data:" field needs.
        return json.dumps(body, separators=(",", ":"))
