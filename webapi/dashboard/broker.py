"""The read-model objects the pages use, over the app's broker (``Resources.broker_context``)."""

from __future__ import annotations

from typing import TypeVar

from flask import abort, redirect, request
from werkzeug.wrappers.response import Response

from asynctask import payload
from asynctask.api import ProcessSet, Queue
from asynctask.api.reader import Reader
from webapi.dashboard.cookie import flash
from webapi.resources import resources

R = TypeVar("R", bound=Reader)

#: Rows a paged table shows.
PAGE_SIZE = 25


def reader(kind: type[R]) -> R:
    return kind.over(resources().broker_context)


def all_queues() -> list[Queue]:
    return Queue.all_over(resources().broker_context)


def listened_queues() -> frozenset[str]:
    """The queues a live worker process takes jobs from; the pages flag a queue with jobs that
    none takes from, and the tasks waiting on it."""
    return reader(ProcessSet).listened_queues()


def queue(name: str) -> Queue:
    """The queue ``name``; 404 for a name no job can carry."""
    if payload.valid_queue(name) is None:
        abort(404)
    return Queue.over(resources().broker_context, name)


def checked_jid(jid: str) -> str:
    """``jid`` from a page's link; 404 for one no job can carry (no store could be asked)."""
    if payload.valid_jid(jid) is None:
        abort(404)
    return jid


def page_number() -> int:
    """The ``page`` query argument (1 when absent); 400 when it is not a page number."""
    text = request.args.get("page", "1")
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        abort(400)
    return int(text)


def done(message: str, back: str) -> Response:
    """After a change: say what was done on the page the operator goes back to (POST, then
    redirect, then GET: a reload does not do it again)."""
    flash(message)
    return redirect(back, 303)
