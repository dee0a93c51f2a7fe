"""Stopped jobs in the read model: counts, finish times, status and ETA, and cancelling, on
SQLite and PostgreSQL."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Engine

from asynctask import JobDefinition, Tracking
from asynctask.registry import Registry
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import Transition
from tests.tracking.test_apply import apply, event_row, make_task, numbered


def test_a_stopped_job_moves_its_count_and_holds_the_task_unfinished_until_it_ends(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, (done, stopped) = make_task(redis_tracking, registry, 2)
    t = time.time()
    first = numbered(
        [
            Transition(done, EventStatus.WORKING.value, t - 2, "started"),
            Transition(done, EventStatus.FINISH.value, t - 1, "finished"),
            Transition(stopped, EventStatus.WORKING.value, t - 2, "started"),
        ]
    )
    apply(database_engine, first)
    assert redis_tracking.get_task(task_id).counts["working"] == 1
    stop, resume, working_again, finish = numbered(
        [
            Transition(stopped, EventStatus.STOPPED.value, t, "stopped at 7"),
            Transition(stopped, EventStatus.ENQUEUE.value, t + 1, "resumed"),
            Transition(stopped, EventStatus.WORKING.value, t + 2, "started"),
            Transition(stopped, EventStatus.FINISH.value, t + 3, "finished"),
        ],
        first=len(first) + 1,
    )

    apply(database_engine, [stop])
    view = redis_tracking.get_task(task_id)
    assert (view.counts["working"], view.counts["stopped"], view.counts["finish"]) == (0, 1, 1)
    # Every other job has ended, yet the stopped one runs again once resumed.
    assert view.finished_at is None and view.status == "running"
    assert (view.done, view.progress) == (1, 0.5)
    # Nothing runs until a resume: no time left to tell, although a job has ended.
    assert view.eta_seconds is None
    row = event_row(database_engine, stopped)
    assert (row.status, row.finished_at) == ("stopped", None)
    (event,) = redis_tracking.list_events(task_id, status="stopped").items
    assert event.messages[-1].text == "stopped at 7"

    apply(database_engine, [resume])
    view = redis_tracking.get_task(task_id)
    assert (view.counts["stopped"], view.counts["enqueue"], view.finished_at) == (0, 1, None)
    assert view.status == "running"

    apply(database_engine, [working_again, finish])
    view = redis_tracking.get_task(task_id)
    assert (view.counts["stopped"], view.counts["finish"], view.status) == (0, 2, "finished")
    assert view.finished_at is not None


def test_one_batch_stopping_the_last_jobs_of_several_tasks_finishes_none(
    redis_tracking: Tracking, noop_job: JobDefinition[Any], database_engine: Engine
) -> None:
    """On PostgreSQL a batch touching several tasks updates them in one statement."""
    tasks = [redis_tracking.create_task(noop_job, range(2)) for _ in range(2)]
    jids = [[e.job_id for e in redis_tracking.list_events(task.id).items] for task in tasks]
    history = [
        Transition(jid, kind.value, time.time(), text)
        for ended, last in jids
        for jid, kind, text in (
            (ended, EventStatus.WORKING, "started"),
            (ended, EventStatus.FINISH, "finished"),
            (last, EventStatus.WORKING, "started"),
            (last, EventStatus.STOPPED, "stopped at 1"),
        )
    ]
    apply(database_engine, numbered(history))
    for task in tasks:
        view = redis_tracking.get_task(task.id)
        assert (view.counts["stopped"], view.counts["finish"], view.counts["working"]) == (1, 1, 0)
        assert view.finished_at is None and view.status == "running"


def test_a_job_stopped_before_it_started_makes_its_task_running(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, (stopped, _) = make_task(redis_tracking, registry, 2)
    assert redis_tracking.get_task(task_id).status == "pending"
    apply(database_engine, numbered([Transition(stopped, EventStatus.STOPPED.value, time.time(), "stopped")]))
    view = redis_tracking.get_task(task_id)
    assert (view.counts["enqueue"], view.counts["stopped"]) == (1, 1)
    assert view.started_at is None and view.status == "running"


def test_cancel_task_turns_stopped_jobs_into_cancelled_ones(
    redis_tracking: Tracking, registry: Registry, database_engine: Engine
) -> None:
    task_id, (stopped, *waiting) = make_task(redis_tracking, registry, 3)
    t = time.time()
    apply(
        database_engine,
        numbered(
            [
                Transition(stopped, EventStatus.WORKING.value, t, "started"),
                Transition(stopped, EventStatus.STOPPED.value, t + 1, "stopped at 3"),
            ]
        ),
    )
    view = redis_tracking.cancel_task(task_id)
    assert view.status == "cancelled"
    assert (view.counts["stopped"], view.counts["enqueue"], view.counts["cancelled"]) == (0, 0, 3)
    # Nothing is left to run: the task has ended.
    assert view.finished_at is not None
    assert [e.job_id for e in redis_tracking.list_events(task_id, status="cancelled").items] == [
        stopped,
        *waiting,
    ]
    assert redis_tracking.list_events(task_id, status="stopped").items == ()
    assert event_row(database_engine, stopped).finished_at is not None
