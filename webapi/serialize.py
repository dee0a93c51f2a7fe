"""Read-model views as the API's JSON: the typed bodies of ``webapi.bodies``, which
``/openapi.json`` documents."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast, overload

from asynctask.api import PeriodicEntry
from asynctask.tracking.views import EventView, FailedItemView, FeedView, MessageView, TaskView
from webapi import bodies
from webapi.bodies import SUMMARY_ERROR_CHARS


def task_urls(task_id: str) -> bodies.Urls:
    base = f"/api/tasks/{task_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "items": f"{base}/items?status=failed",
        "stream": f"{base}/stream",
    }


def task_json(view: TaskView) -> bodies.Task:
    return {
        **task_fields(view),
        "errors": [event_json(e) for e in view.errors],
        "callbacks": [
            {
                "kind": c.kind,
                "job": c.job_name,
                "job_id": c.jid,
                "state": c.state,
                "fired_at": _time(c.fired_at),
            }
            for c in view.callbacks
        ],
        "run_if": view.run_if,
        "hold": view.hold,
        "cancel_reason": view.cancel_reason,
        "parents": [
            {"task_id": p.task_id, "job": p.job_name, "ended_at": _time(p.ended_at), "succeeded": p.succeeded}
            for p in view.parents
        ],
        "children": [{"task_id": c.task_id, "job": c.job_name, "hold": c.hold} for c in view.children],
        "children_count": view.children_count,
    }


def task_fields(view: TaskView) -> bodies.TaskFields:
    """The task without its errors: what a progress stream sends on every change."""
    return {
        "id": view.id,
        "job": view.job_name,
        "queue": view.queue,
        "runtime": view.runtime or "asynctask",
        "status": view.status,
        "total": view.total,
        # The read model counts every event status, those at 0 included.
        "counts": cast(bodies.TaskCounts, view.counts),
        "done": view.done,
        "progress": view.progress,
        "items": {"total": view.items.total, "done": view.items.done, "failed": view.items.failed},
        "eta_seconds": view.eta_seconds,
        "ahead": view.ahead,
        "feed": feed_json(view.feed),
        "created_at": _time(view.created_at),
        "started_at": _time(view.started_at),
        "finished_at": _time(view.finished_at),
        "cancelled_at": _time(view.cancelled_at),
        "meta": view.meta,
        "urls": task_urls(view.id),
    }


def feed_json(view: FeedView | None) -> bodies.Feed | None:
    if view is None:
        return None
    return {
        "parallel": view.parallel,
        "interval": view.interval,
        "priority": view.priority,
        "paused": view.paused,
        "held": view.held,
    }


def event_json(view: EventView) -> bodies.Event:
    progress: bodies.JobProgress | None = None
    if view.progress_done is not None or view.progress_total is not None:
        progress = {"done": view.progress_done, "total": view.progress_total}
    return {
        "id": view.id,
        "job_id": view.job_id,
        "status": view.status,
        "params": view.params,
        "attempt": view.attempt,
        "error": view.error,
        "error_class": view.error_class,
        "progress": progress,
        "items_run": None
        if view.items_done is None and view.items_failed is None
        else {"done": view.items_done or 0, "failed": view.items_failed or 0},
        "enqueued_at": _time(view.enqueued_at),
        "started_at": _time(view.started_at),
        "finished_at": _time(view.finished_at),
        "updated_at": _time(view.updated_at),
        "messages": [message_json(m) for m in view.messages],
        "earlier_messages": view.earlier_messages,
    }


def failed_item_json(view: FailedItemView) -> bodies.FailedItem:
    return {
        "id": view.id,
        "job_id": view.job_id,
        "position": view.position,
        "item": view.item,
        "message": view.message,
        "at": _time(view.at),
    }


def error_summary(view: EventView) -> bodies.ErrorSummary:
    """A failed or error event in a few fields, for progress streams: no parameters (a chunk may
    be large; ``items`` counts it), no message log, the message cut at ``SUMMARY_ERROR_CHARS``."""
    error = view.error
    if error is not None and len(error) > SUMMARY_ERROR_CHARS:
        error = error[: SUMMARY_ERROR_CHARS - 1] + "…"
    chunk = view.params[0] if view.params else None
    return {
        "id": view.id,
        "job_id": view.job_id,
        "status": view.status,
        "attempt": view.attempt,
        "error": error,
        "error_class": view.error_class,
        "items": len(chunk) if isinstance(chunk, list) else None,
    }


def message_json(view: MessageView) -> bodies.Message:
    return {"at": _time(view.at), "status": view.status, "text": view.text}


def schedule_json(entry: PeriodicEntry) -> bodies.Schedule:
    record = entry.record
    return {
        "name": record.name,
        "job": record.job,
        "cron": record.cron,
        "tz": record.tz,
        "queue": record.queue,
        "catch_up": record.catch_up,
        "paused": record.paused,
        "next_run": _epoch_time(entry.next_run),
        "last_run": _epoch_time(record.last),
        "last_jid": record.last_jid,
        "last_enqueued_at": _epoch_time(record.last_enqueued_at),
    }


@overload
def _time(value: datetime) -> str: ...
@overload
def _time(value: datetime | None) -> str | None: ...
def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _epoch_time(seconds: float | None) -> str | None:
    """Epoch seconds (how the broker keeps a schedule's times) as the other times are: UTC ISO 8601."""
    return _time(datetime.fromtimestamp(seconds, UTC)) if seconds is not None else None
