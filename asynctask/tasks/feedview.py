"""A fed task's view with its held jobs, as the task's broker counts them.

The read model (``tracking.queries``) is SQL alone and cannot know how many jobs a broker
still holds back: this asks the broker, once per view and at constant cost
(``Feeds.state``), for a fed task that has not ended (an ended one holds none).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from asynctask.client import Client
from asynctask.tracking.status import TaskStatus
from asynctask.tracking.views import TaskView

logger = logging.getLogger("asynctask.tracking")


def with_held(view: TaskView, client: Client) -> TaskView:
    """``view`` with ``feed.held`` from the broker. A broker that does not answer leaves it
    None: a status poll still shows the task's progress, which lives in SQL."""
    if view.feed is None or view.feed.held is not None:
        return view
    feeds = client.broker.feeds
    try:
        state = feeds.state(view.id)
    except feeds.errors as exc:
        logger.warning("task %s: the broker did not say how many jobs it holds: %s", view.id, exc)
        return view
    if state is None:
        # No feed: not published yet (the task is still being created), or released and
        # ended to the last job, when the broker may forget it.
        return view if view.status == TaskStatus.CREATING else replace(view, feed=replace(view.feed, held=0))
    return replace(view, feed=replace(view.feed, held=state.held))
