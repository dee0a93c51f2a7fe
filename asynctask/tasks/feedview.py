"""A fed task's view with its held jobs, as the task's broker counts them, and where its feed
stands.

The read model (``tracking.queries``) is SQL alone and cannot know how many jobs a broker
still holds back: this asks the broker, once per view and at constant cost
(``Feeds.state``), for a fed task that has not ended (an ended one holds none).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from enum import StrEnum

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


class FeedPhase(StrEnum):
    """Where a fed task's feed stands, as the dashboard shows it."""

    #: Jobs are held, and released as the settings allow.
    RELEASING = "releasing"
    PAUSED = "paused"
    #: Every job is out (queued, running or ended) and the task runs on: nothing is left to
    #: release, so the settings change nothing.
    RELEASED = "released"
    #: The task has ended (finished, cancelled or aborted): its feed cannot change any more.
    DONE = "done"


#: Task statuses after which ``update_task`` refuses a feed change.
ENDED = frozenset(
    {TaskStatus.FINISHED, TaskStatus.FINISHED_WITH_ERRORS, TaskStatus.CANCELLED, TaskStatus.ABORTED}
)


def feed_phase(view: TaskView) -> FeedPhase | None:
    """Where the task's feed stands (None for a task that is not fed), from a view with its
    held jobs (``with_held``); a feed whose held jobs the broker did not say is releasing."""
    feed = view.feed
    if feed is None:
        return None
    if view.status in ENDED:
        return FeedPhase.DONE
    if feed.paused:
        return FeedPhase.PAUSED
    if feed.held == 0:
        return FeedPhase.RELEASED
    return FeedPhase.RELEASING
