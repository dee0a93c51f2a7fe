"""Live worker processes and the jobs their threads run; quiet or stop a process."""

from __future__ import annotations

from flask import abort, render_template, url_for
from werkzeug.wrappers.response import Response

from asynctask.api import ProcessSet, WorkSet
from webapi.dashboard.blueprint import dashboard
from webapi.dashboard.broker import checked_jid, done, reader
from webapi.responses import json_response

#: What each action asks the process to do, and how the page says it.
_SIGNALS = {"quiet": ("TSTP", "told to finish its jobs and take no more"), "stop": ("TERM", "told to stop")}


@dashboard.get("/processes")
def processes() -> str:
    return render_template(
        "asynctask_dashboard/processes.html",
        processes=reader(ProcessSet).processes(),
        works=sorted(reader(WorkSet).works(), key=lambda work: work.run_at or 0.0),
    )


@dashboard.get("/processes/jobs/<jid>/args")
def work_args(jid: str) -> Response:
    """A running job's arguments, whole, as JSON: the page shows their start."""
    work = reader(WorkSet).find(checked_jid(jid))
    if work is None:
        abort(404)
    return json_response(work.job.args)


@dashboard.post("/processes/<identity>/<action>")
def signal(identity: str, action: str) -> Response:
    if action not in _SIGNALS:
        abort(404)
    process = reader(ProcessSet).get(identity)
    if process is None:
        abort(404)
    name, said = _SIGNALS[action]
    process.signal(name)
    return done(f"{identity}: {said}", url_for(".processes"))
