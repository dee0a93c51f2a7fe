"""Every tenant's tasks with their progress; a task's counts, first errors, feed and events
with their message logs; cancel, retry, tune or pause its feed, resume its stopped jobs."""

from __future__ import annotations

from typing import Any

from flask import abort, render_template, request, url_for
from werkzeug.wrappers.response import Response

from asynctask.errors import AsyncTaskError, TaskNotFound
from asynctask.tracking.status import EventStatus
from webapi.dashboard.blueprint import dashboard
from webapi.dashboard.broker import PAGE_SIZE, done
from webapi.errors import ApiError
from webapi.feeds import FIELDS, checked, from_text
from webapi.resources import resources

#: Longest cursor the pages pass back (a timestamp and a task id; an event id).
MAX_CURSOR = 100


@dashboard.get("/tasks")
def tasks() -> str:
    before = _cursor("before")
    try:
        page = resources().tracking.list_tasks(None, before=before, limit=PAGE_SIZE, every_tenant=True)
    except ValueError:
        abort(400)
    return render_template("dashboard/tasks.html", page=page)


@dashboard.get("/tasks/<task_id>")
def task(task_id: str) -> str:
    tracking = resources().tracking
    status = request.args.get("status") or None
    if status is not None and status not in {s.value for s in EventStatus}:
        abort(400)
    try:
        view = tracking.get_task(task_id)
        events = tracking.list_events(task_id, status=status, after=_cursor("after"), limit=PAGE_SIZE)
    except TaskNotFound:
        abort(404)
    except ValueError:
        abort(400)
    return render_template(
        "dashboard/task.html",
        task=view,
        events=events,
        status=status,
        statuses=[s.value for s in EventStatus],
    )


@dashboard.post("/tasks/<task_id>/<action>")
def task_action(task_id: str, action: str) -> Response:
    tracking = resources().tracking
    back = url_for("dashboard.task", task_id=task_id)
    try:
        if action == "cancel":
            tracking.cancel_task(task_id)
            return done("task cancelled: its waiting jobs will not run", back)
        if action == "retry":
            return done(f"{tracking.retry_task(task_id)} failed jobs enqueued again", back)
        if action == "pause":
            tracking.pause_task(task_id)
            return done("feed paused: no more jobs are released until it is resumed", back)
        if action == "resume":
            tracking.resume_task(task_id)
            return done("feed resumed", back)
        if action == "update":
            tracking.update_task(task_id, **_feed_change())
            return done("feed updated", back)
        if action == "resume-job":
            jid = request.form.get("jid", "")
            return done(f"job {jid} sent back to queue {tracking.resume_job(jid)}", back)
    except TaskNotFound:
        abort(404)
    except ApiError as exc:
        return done(f"not done: {exc.message}", back)
    except (AsyncTaskError, ValueError) as exc:
        # A task that ended, is not fed, a job no longer stopped: said on the page.
        return done(f"not done: {exc}", back)
    abort(404)


def _feed_change() -> dict[str, Any]:
    """The tuning form's settings, checked as ``PATCH /api/tasks/<id>`` checks them; an empty
    field leaves its setting as it is."""
    sent = {name: request.form[name].strip() for name in FIELDS if request.form.get(name, "").strip()}
    return checked(from_text(sent))


def _cursor(name: str) -> str | None:
    value = request.args.get(name) or None
    if value is not None and len(value) > MAX_CURSOR:
        abort(400)
    return value
