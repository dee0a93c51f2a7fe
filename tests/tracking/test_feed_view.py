"""A fed task's view: its feed as last set, the jobs its broker holds, and the ETA as its feed
changes (SQLite and PostgreSQL tracking, Redis broker)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from asynctask import Client, Registry, Settings, TaskStateError, Tracking, job
from asynctask.tasks.feedview import with_held
from asynctask.tracking import queries
from asynctask.tracking.eta import read_mark
from asynctask.tracking.models import Task
from asynctask.tracking.views import FeedView
from asynctask.worker import Worker
from tests.tracking_fixtures import wait_for_task


@pytest.fixture
def echo(registry: Registry) -> str:
    @job(registry=registry, retry=False)
    def echo(chunk: list[Any]) -> None:
        pass

    return "echo"


def stored_feed(tracking: Tracking, task_id: str) -> Any:
    with tracking.engine.connect() as connection:
        return connection.execute(select(Task.feed).where(Task.id == task_id)).scalar_one()


def as_if_running(tracking: Tracking, task_id: str, *, finished: int, total: int, seconds: float) -> None:
    """The counts a worker would have left after ``finished`` jobs in ``seconds`` (none runs here)."""
    started = datetime.now(UTC) - timedelta(seconds=seconds)
    with tracking.engine.begin() as connection:
        connection.execute(
            update(Task)
            .where(Task.id == task_id)
            .values(count_finish=finished, count_enqueue=total - finished, started_at=started)
        )


def test_a_fed_task_shows_its_feed_and_the_jobs_its_broker_holds(redis_tracking: Tracking, echo: str) -> None:
    task = redis_tracking.create_task(echo, range(10), parallel=3, interval=0.5, priority=-2)
    assert task.feed == FeedView(parallel=3, interval=0.5, priority=-2, paused=False, held=7)
    assert redis_tracking.create_task(echo, range(2)).feed is None
    # A list does not ask the broker about each of its tasks.
    (listed,) = [v for v in redis_tracking.list_tasks(None).items if v.id == task.id]
    assert listed.feed == FeedView(parallel=3, interval=0.5, priority=-2, paused=False, held=None)


def test_changes_show_at_once(redis_tracking: Tracking, echo: str) -> None:
    task = redis_tracking.create_task(echo, range(10), parallel=3)
    redis_tracking.update_task(task.id, parallel=5, priority=4)
    assert redis_tracking.get_task(task.id).feed == FeedView(5, 0.0, 4, False, held=5)
    redis_tracking.pause_task(task.id)
    assert redis_tracking.get_task(task.id).feed == FeedView(5, 0.0, 4, True, held=5)
    redis_tracking.update_task(task.id, interval=2)
    redis_tracking.resume_task(task.id)
    assert redis_tracking.get_task(task.id).feed == FeedView(5, 2.0, 4, False, held=5)


def test_the_eta_goes_by_the_rate_seen_and_gives_none_while_paused(
    redis_tracking: Tracking, echo: str
) -> None:
    task = redis_tracking.create_task(echo, range(100), parallel=5)
    assert redis_tracking.get_task(task.id).eta_seconds is None
    # 20 ended in 10 s: 80 left at 2 a second.
    as_if_running(redis_tracking, task.id, finished=20, total=100, seconds=10)
    assert redis_tracking.get_task(task.id).eta_seconds == pytest.approx(40, rel=0.05)
    redis_tracking.pause_task(task.id)
    paused = redis_tracking.get_task(task.id)
    assert paused.status == "running" and paused.eta_seconds is None
    redis_tracking.resume_task(task.id)
    # Nothing has ended since the resume: the whole run's rate stands in.
    assert redis_tracking.get_task(task.id).eta_seconds == pytest.approx(40, rel=0.05)


def test_each_change_marks_where_the_rate_is_measured_from(redis_tracking: Tracking, echo: str) -> None:
    task = redis_tracking.create_task(echo, range(100), parallel=5)
    assert read_mark(stored_feed(redis_tracking, task.id)) is None
    as_if_running(redis_tracking, task.id, finished=20, total=100, seconds=10)
    before = datetime.now(UTC)
    redis_tracking.update_task(task.id, parallel=8)
    mark = read_mark(stored_feed(redis_tracking, task.id))
    assert mark is not None and mark.ended == 20
    assert before <= mark.at <= datetime.now(UTC)
    assert stored_feed(redis_tracking, task.id)["parallel"] == 8


def test_an_ended_task_holds_nothing_and_its_feed_cannot_change(
    redis_tracking: Tracking, echo: str, start_tracked_worker: Callable[..., Worker]
) -> None:
    cancelled = redis_tracking.create_task(echo, range(10), parallel=2)
    assert redis_tracking.cancel_task(cancelled.id).feed == FeedView(2, 0.0, 0, False, held=0)
    start_tracked_worker()
    finished = wait_for_task(redis_tracking, redis_tracking.create_task(echo, range(4), parallel=2).id)
    assert finished.status == "finished" and finished.eta_seconds is None
    assert finished.feed == FeedView(2, 0.0, 0, False, held=0)
    for ended in (cancelled.id, finished.id):
        with pytest.raises(TaskStateError, match="has ended"):
            redis_tracking.update_task(ended, parallel=3)
        with pytest.raises(TaskStateError, match="has ended"):
            redis_tracking.pause_task(ended)


def test_a_task_that_is_not_fed_has_no_feed_to_change(redis_tracking: Tracking, echo: str) -> None:
    task = redis_tracking.create_task(echo, range(3))
    with pytest.raises(TaskStateError, match="not fed"):
        redis_tracking.update_task(task.id, parallel=3)


def test_a_broker_that_does_not_answer_leaves_held_unknown(
    redis_tracking: Tracking, echo: str, tracked_settings: Settings
) -> None:
    task = redis_tracking.create_task(echo, range(10), parallel=3)
    with redis_tracking.engine.connect() as connection:
        view = queries.get_task(connection, task.id)
    assert view.feed is not None and view.feed.held is None
    assert with_held(view, redis_tracking.client).feed == FeedView(3, 0.0, 0, False, held=7)
    unreachable = Client(Settings(**{**tracked_settings.__dict__, "redis_url": "redis://127.0.0.1:1/0"}))
    started = time.monotonic()
    shown = with_held(view, unreachable)
    assert shown.feed == FeedView(3, 0.0, 0, False, held=None)
    assert shown.done == view.done and time.monotonic() - started < 10
