"""The periodic schedules with their next and last runs; pause or resume one."""

from __future__ import annotations

from flask import abort, render_template, url_for
from werkzeug.wrappers.response import Response

from asynctask.api import PeriodicSet
from webapi.dashboard.blueprint import dashboard
from webapi.dashboard.broker import done, reader


@dashboard.get("/periodic")
def periodic() -> str:
    return render_template(
        "asynctask_dashboard/periodic.html",
        schedules=sorted(reader(PeriodicSet), key=lambda entry: entry.name),
    )


@dashboard.post("/periodic/<name>/<action>")
def periodic_action(name: str, action: str) -> Response:
    schedules = reader(PeriodicSet)
    if action == "pause":
        changed = schedules.pause(name)
    elif action == "resume":
        changed = schedules.resume(name)
    else:
        abort(404)
    if not changed:
        abort(404)
    return done(f"schedule {name} {action}d", url_for(".periodic"))
