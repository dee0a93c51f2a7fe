"""Queues: their size, latency and whether they are paused; a queue's waiting jobs, page by page.

A paused queue keeps its jobs and takes new ones; no worker takes from it until it is resumed.
"""

from __future__ import annotations

from itertools import islice

from flask import abort, render_template, request, url_for
from werkzeug.wrappers.response import Response

from webapi.dashboard.blueprint import dashboard
from webapi.dashboard.broker import (
    PAGE_SIZE,
    all_queues,
    checked_jid,
    done,
    listened_queues,
    page_number,
    queue,
)
from webapi.responses import json_response


@dashboard.get("/queues")
def queues() -> str:
    return render_template("asynctask_dashboard/queues.html", queues=all_queues(), listened=listened_queues())


@dashboard.get("/queues/<name>")
def queue_page(name: str) -> str:
    found = queue(name)
    page = page_number()
    start = (page - 1) * PAGE_SIZE
    # One more than a page tells whether a next page exists.
    jobs = list(islice(found, start, start + PAGE_SIZE + 1))
    return render_template(
        "asynctask_dashboard/queue.html",
        queue=found,
        jobs=jobs[:PAGE_SIZE],
        page=page,
        more=len(jobs) > PAGE_SIZE,
        listened=listened_queues(),
    )


@dashboard.get("/queues/<name>/jobs/<jid>/args")
def job_args(name: str, jid: str) -> Response:
    """A waiting job's arguments, whole, as JSON: the page shows their start (on Redis this
    scans the queue, as a search does)."""
    job = queue(name).find_job(checked_jid(jid))
    if job is None:
        abort(404)
    return json_response(job.args)


@dashboard.post("/queues/<name>/pause")
def pause(name: str) -> Response:
    queue(name).pause()
    return done(f"queue {name} paused: no worker takes its jobs until it is resumed", url_for(".queues"))


@dashboard.post("/queues/<name>/resume")
def resume(name: str) -> Response:
    queue(name).resume()
    return done(f"queue {name} resumed", url_for(".queues"))


@dashboard.post("/queues/<name>/clear")
def clear(name: str) -> Response:
    removed = queue(name).clear()
    return done(f"queue {name} cleared: {removed} jobs deleted", url_for(".queues"))


@dashboard.post("/queues/<name>/delete")
def delete_job(name: str) -> Response:
    found = queue(name)
    jid = request.form.get("jid", "")
    job = found.find_job(jid) if jid else None
    message = f"job {jid} deleted" if job is not None and job.delete() else f"job {jid} was no longer waiting"
    return done(message, url_for(".queue_page", name=name))
