"""The overview: counters now and per day, queues, busy threads and the sets' sizes.

Two counts of failure, told apart by their labels: the workers' ``failed`` counter ("Jobs
raised") counts runs that raised an exception, retried or dead; a job that raises ``JobFailed``
is a business outcome, done and not counted there, and shows as ``failed`` in its task ("Failed
in tasks", from the tasks' counts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flask import render_template

from asynctask.api import ProcessSet, Stats
from asynctask.api.processes import listened
from asynctask.tracking import queries, setaside
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
        "asynctask_dashboard/overview.html",
        stats=stats,
        busy=sum(process.busy for process in processes),
        concurrency=sum(process.concurrency for process in processes),
        processes=len(processes),
        queues=all_queues(),
        listened=listened(processes),
        chart=daily_chart(history),
        set_aside=setaside.count(db()),
        failed_in_tasks=queries.failed_since(db(), datetime.now(UTC) - timedelta(days=HISTORY_DAYS)),
        history_days=HISTORY_DAYS,
    )
