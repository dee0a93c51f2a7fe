"""A task's view with its place in its queue, as the task's broker estimates it.

The read model (``tracking.queries``) is SQL alone and cannot know where a task's waiting jobs
stand in their queue: this asks the broker, once per view, for a task with jobs waiting
(``Broker.jobs_ahead``), so that a front end can say how long a task that has not started
will wait.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from sqlalchemy import Connection

from asynctask.client import Client
from asynctask.fairness import share_of
from asynctask.tracking import queries
from asynctask.tracking.status import EventStatus, TaskStatus
from asynctask.tracking.views import TaskView

logger = logging.getLogger("asynctask.tracking")

#: Statuses whose task may have jobs waiting in its queue.
WAITING = (TaskStatus.PENDING, TaskStatus.RUNNING)


def with_ahead(view: TaskView, client: Client, connection: Connection) -> TaskView:
    """``view`` with ``ahead`` from the broker (and, for a tenant's task, its earlier tasks'
    waiting jobs from ``connection``'s database). A broker that does not answer leaves it None:
    a status poll still shows the task's progress, which lives in SQL."""
    waiting = view.counts.get(EventStatus.ENQUEUE.value, 0)
    if view.status not in WAITING or waiting <= 0:
        return view
    earlier = queries.earlier_waiting(connection, view)
    broker = client.broker
    try:
        ahead = broker.jobs_ahead(view.queue, share_of(view.id, view.tenant), waiting, earlier)
    except broker.errors as exc:
        logger.warning("task %s: the broker did not say where its jobs stand: %s", view.id, exc)
        return view
    return replace(view, ahead=ahead)
