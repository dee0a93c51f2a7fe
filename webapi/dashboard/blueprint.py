"""The dashboard's blueprint, its guard and its template helpers; the pages add their routes.

Its templates live under ``asynctask_dashboard/`` and its filters are named ``asynctask_*``: an app
that mounts the dashboard shares one template loader and one set of filters with it, and keeps
its own ``dashboard/`` templates and filters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint

from webapi.dashboard import access, cookie

dashboard = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)
# The session is read before the guard, which looks for the login in it.
dashboard.before_request(cookie.open_session)
dashboard.before_request(access.guard)
dashboard.after_request(cookie.save_session)
dashboard.add_url_rule("/login", view_func=access.login_form, methods=["GET"])
dashboard.add_url_rule("/login", endpoint="login_submit", view_func=access.login_submit, methods=["POST"])
dashboard.add_url_rule("/logout", view_func=access.logout, methods=["POST"])
dashboard.context_processor(
    lambda: {"csrf_token": access.csrf_token, "flashed": cookie.flashed, "token_login": access.token_login}
)

#: Characters of a job's arguments a page shows: a chunk of rows is a line, not a screenful;
#: the whole value is a link away.
PREVIEW_CHARS = 120


@dataclass(frozen=True, slots=True)
class Preview:
    """A value's JSON text as a page shows it: whole, or its start and the whole one's size."""

    text: str
    #: Bytes of the whole JSON text when ``text`` is its start only; None when it is whole.
    size: int | None


@dashboard.app_template_filter("asynctask_as_json")
def as_json(value: Any) -> str:
    """A job's arguments as JSON text: a plain ``str``, so Jinja escapes it like any other text."""
    return json.dumps(value, ensure_ascii=False, default=str)


@dashboard.app_template_filter("asynctask_preview")
def preview(value: Any) -> Preview:
    text = as_json(value)
    if len(text) <= PREVIEW_CHARS:
        return Preview(text, None)
    return Preview(text[:PREVIEW_CHARS] + "…", len(text.encode()))


@dashboard.app_template_filter("asynctask_size")
def size(value: int) -> str:
    if value < 1000:
        return f"{value} bytes"
    if value < 1_000_000:
        return f"{value / 1000:.1f} KB"
    return f"{value / 1_000_000:.1f} MB"


@dashboard.app_template_filter("asynctask_when")
def when(value: float | datetime | None) -> str:
    if value is None:
        return "—"
    moment = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dashboard.app_template_filter("asynctask_seconds")
def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"
