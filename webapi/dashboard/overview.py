"""The overview: counters now and per day, queues, busy threads and the sets' sizes."""

from __future__ import annotations

from flask import render_template

from asynctask.api import ProcessSet, Stats
from asynctask.tracking import setaside
from webapi.dashboard.blueprint import dashboard
from webapi.dashboard.broker import all_queues, reader
from webapi.dashboard.chart import daily_chart
from webapi.resources import db

#: Days the chart shows.
HISTORY_DAYS = 30


@dashboard.get("/")
def overview() -> str:
    stats = reader(Stats)
    processes = reader(ProcessSet).processes()
    history = stats.history(HISTORY_DAYS)
    return render_template(
        "dashboard/overview.html",
        stats=stats,
        busy=sum(process.busy for process in processes),
        concurrency=sum(process.concurrency for process in processes),
        processes=len(processes),
        queues=all_queues(),
        chart=daily_chart(history),
        set_aside=setaside.count(db()),
    )
