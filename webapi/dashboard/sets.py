"""The scheduled, retry, dead and stopped sets: paged, searchable, and acted on one entry, a
selection or all at once.

An entry is named by its score and jid (as Sidekiq's web UI names them): an entry that moved
or changed since the page was drawn is simply not found, never another job acted on.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice

from flask import abort, render_template, request, url_for
from werkzeug.wrappers.response import Response

from asynctask.api import DeadSet, JobSet, RetrySet, ScheduledSet, SortedEntry, StoppedSet
from asynctask.errors import AsyncTaskError
from webapi.dashboard.blueprint import dashboard
from webapi.dashboard.broker import PAGE_SIZE, done, page_number, reader
from webapi.resources import resources
from webapi.responses import json_response

_SETS: dict[str, type[JobSet]] = {
    "scheduled": ScheduledSet,
    "retry": RetrySet,
    "dead": DeadSet,
    "stopped": StoppedSet,
}
#: What each set offers, besides delete: enqueue now, move to the dead set, resume a stopped job.
ACTIONS = {
    "scheduled": ("enqueue", "delete"),
    "retry": ("retry", "kill", "delete"),
    "dead": ("retry", "delete"),
    "stopped": ("resume", "delete"),
}
#: Longest search text: a scan reads every entry, the text need not be long too.
MAX_SEARCH = 200
#: Entries one bulk request may name.
MAX_SELECTED = 1000


@dashboard.get("/sets/<name>")
def job_set(name: str) -> str:
    found = _set(name)
    search = request.args.get("q", "").strip()[:MAX_SEARCH]
    page = page_number()
    start = (page - 1) * PAGE_SIZE
    entries = iter(found.scan(search)) if search else iter(found)
    shown = list(islice(entries, start, start + PAGE_SIZE + 1))
    return render_template(
        "asynctask_dashboard/set.html",
        name=name,
        size=found.size,
        entries=shown[:PAGE_SIZE],
        more=len(shown) > PAGE_SIZE,
        page=page,
        search=search,
        actions=ACTIONS[name],
    )


@dashboard.get("/sets/<name>/args")
def entry_args(name: str) -> Response:
    """An entry's arguments, whole, as JSON (``?entry=score|jid``): the page shows their start."""
    entry = _entry(_set(name), request.args.get("entry", ""))
    if entry is None:
        abort(404)
    return json_response(entry.args)


@dashboard.post("/sets/<name>")
def act(name: str) -> Response:
    found = _set(name)
    action = request.form.get("action", "")
    if action not in ACTIONS[name]:
        abort(400)
    back = url_for(".job_set", name=name, q=request.form.get("q") or None)
    if request.form.get("all") == "1":
        return done(_all(found, action), back)
    keys = request.form.getlist("entry")[:MAX_SELECTED]
    entries = [entry for key in keys if (entry := _entry(found, key)) is not None]
    moved = _apply(found, action, entries)
    missing = len(keys) - len(entries)
    note = f" ({missing} no longer there)" if missing else ""
    return done(f"{action}: {moved} of {len(keys)} entries{note}", back)


def _set(name: str) -> JobSet:
    kind = _SETS.get(name)
    if kind is None:
        abort(404)
    return reader(kind)


def _entry(found: JobSet, key: str) -> SortedEntry | None:
    score_text, _, jid = key.partition("|")
    try:
        score = float(score_text)
    except ValueError:
        abort(400)
    matches = [entry for entry in found.fetch(score) if (entry.jid or "") == jid]
    return matches[0] if matches else None


def _apply(found: JobSet, action: str, entries: list[SortedEntry]) -> int:
    if action == "delete":
        return sum(entry.delete() for entry in entries)
    if action == "kill":
        return found.kill_entries(entries)
    if action == "resume":
        return sum(_resume(entry) for entry in entries)
    return found.enqueue_entries(entries, decrement_retry_count=action == "retry")


def _resume(entry: SortedEntry) -> bool:
    """Resume through the tracking service, so the job's event shows it enqueued again."""
    if entry.jid is None:
        return False
    try:
        resources().tracking.resume_job(entry.jid)
    except AsyncTaskError:
        # Resumed or dropped by someone else since the page was drawn.
        return False
    return True


def _all(found: JobSet, action: str) -> str:
    bulk: dict[str, Callable[[], int]] = {"delete": found.clear}
    if isinstance(found, RetrySet | DeadSet):
        bulk["retry"] = found.retry_all
    if isinstance(found, RetrySet):
        bulk["kill"] = found.kill_all
    run = bulk.get(action)
    if run is None:
        abort(400)
    return f"{action}: {run()} entries"
