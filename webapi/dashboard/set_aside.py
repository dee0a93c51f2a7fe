"""Tracking transitions the database refused for their data, kept aside: the latest ones, with
the job, the database's reason and the bytes."""

from __future__ import annotations

from flask import render_template

from asynctask.tracking import setaside
from webapi.dashboard.blueprint import dashboard
from webapi.resources import db

#: Rows the page lists, newest first.
LISTED = 100


@dashboard.get("/set-aside")
def set_aside() -> str:
    connection = db()
    return render_template(
        "asynctask_dashboard/set_aside.html",
        total=setaside.count(connection),
        rows=setaside.latest(connection, LISTED),
    )
