"""The dashboard's blueprint, its guard and its template helpers; the pages add their routes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint

from webapi.dashboard import access

dashboard = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)
dashboard.before_request(access.guard)
dashboard.add_url_rule("/login", view_func=access.login_form, methods=["GET"])
dashboard.add_url_rule("/login", endpoint="login_submit", view_func=access.login_submit, methods=["POST"])
dashboard.add_url_rule("/logout", view_func=access.logout, methods=["POST"])
dashboard.app_context_processor(lambda: {"csrf_token": access.csrf_token})


@dashboard.app_template_filter("as_json")
def as_json(value: Any) -> str:
    """A job's arguments as JSON text: a plain ``str``, so Jinja escapes it like any other text."""
    return json.dumps(value, ensure_ascii=False, default=str)


@dashboard.app_template_filter("when")
def when(value: float | datetime | None) -> str:
    if value is None:
        return "—"
    moment = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dashboard.app_template_filter("seconds")
def seconds(value: float | None) -> str:
    if value is None:
        return "—"
    if value < 60:
        return f"{value:.1f} s"
    if value < 3600:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"
