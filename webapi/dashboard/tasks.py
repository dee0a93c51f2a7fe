"""Every tenant's tasks with their progress; a task's counts, first errors, feed and events
with their message logs; cancel, retry, tune or pause its feed, resume its stopped jobs."""

from __future__ import annotations

from typing import Any

from flask import abort, render_template, request, url_for
from werkzeug.wrappers.response import Response

from asynctask.errors import AsyncTaskError, JobNotFound, TaskNotFound
from asynctask.tasks.feedview import feed_phase
from asynctask.tasks.queue_place import WAITING
from asynctask.tracking import queries
from asynctask.tracking.status import EventStatus
from asynctask.tracking.views import TaskView
from webapi.dashboard.blueprint import dashboard
from webapi.dashboard.broker import PAGE_SIZE, done, listened_queues
from webapi.errors import ApiError
from webapi.feeds import FIELDS, checked, from_text
from webapi.resources import db, resources
from webapi.responses import json_response

#: Longest cursor the pages pass back (a timestamp and a task id; an event id).
MAX_CURSOR = 100


@dashboard.get("/tasks")
def tasks() -> str:
    before = _cursor("before")
    try:
        page = resources().tracking.list_tasks(None, before=before, limit=PAGE_SIZE, every_tenant=True)
    except ValueError:
        abort(400)
    listened = listened_queues()
    unheard = {view.id for view in page.items if _unheard(view, listened)}
    return render_template("asynctask_dashboard/tasks.html", page=page, unheard=unheard)


@dashboard.get("/tasks/<task_id>")
def task(task_id: str) -> str:
    tracking = resources().tracking
    status = request.args.get("status") or None
    if status is not None and status not in {s.value for s in EventStatus}:
        abort(400)
    try:
        view = tracking.get_task(task_id)
        events = tracking.list_events(task_id, status=status, after=_cursor("after"), limit=PAGE_SIZE)
        failed_items = (
            tracking.list_failed_items(task_id, after=_cursor("items_after"), limit=PAGE_SIZE)
            if view.items.failed
            else None
        )
    except TaskNotFound:
        abort(404)
    except ValueError:
        abort(400)
    return render_template(
        "asynctask_dashboard/task.html",
        task=view,
        feed=feed_phase(view),
        unheard=_unheard(view, listened_queues()),
        events=events,
        failed_items=failed_items,
        status=status,
        statuses=[s.value for s in EventStatus],
    )


@dashboard.get("/tasks/<task_id>/jobs/<jid>/params")
def event_params(task_id: str, jid: str) -> Response:
    """A task's job's arguments, whole, as JSON: the task's page shows their start."""
    try:
        return json_response(queries.event_params(db(), task_id, jid))
    except JobNotFound:
        abort(404)


@dashboard.post("/tasks/<task_id>/<action>")
def task_action(task_id: str, action: str) -> Response:
    tracking = resources().tracking
    back = url_for(".task", task_id=task_id)
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


def _unheard(view: TaskView, listened: frozenset[str]) -> bool:
    """Whether the task has jobs still to run on a queue no live worker listens to: they wait.
    Another runtime's workers are not AsyncTask's to see."""
    return view.runtime is None and view.status in WAITING and view.queue not in listened


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
