"""A task's callbacks on every broker: each kind that applies is pushed once when the task ends,
with the task's summary, and runs as a normal job after the task's last job ended."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from sqlalchemy import Engine, select, update

from asynctask import JobFailed, Registry, Settings, Tracking, job
from asynctask.api import Queue
from asynctask.brokers import callback_pusher
from asynctask.job import JobDefinition
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.tracking import callbacks
from asynctask.tracking.models import Event, TaskCallback
from asynctask.tracking.views import TaskView
from asynctask.worker import Worker
from tests.conftest import wait_until
from tests.tracking_fixtures import wait_for_task


class Calls:
    """What the callback jobs were called with, and when, by kind."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, list[tuple[float, list[Any]]]] = {}

    def add(self, kind: str, args: list[Any]) -> None:
        with self.lock:
            self.seen.setdefault(kind, []).append((time.time(), args))

    def of(self, kind: str) -> list[list[Any]]:
        with self.lock:
            return [args for _, args in self.seen.get(kind, [])]


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def kinds(registry: Registry, calls: Calls) -> dict[str, JobDefinition[Any]]:
    """One callback job per kind, recording its calls."""
    made: dict[str, JobDefinition[Any]] = {}
    for kind in callbacks.KINDS:

        def record(summary: dict[str, Any], *args: Any, kind: str = kind) -> None:
            calls.add(kind, [summary, *args])

        record.__name__ = record.__qualname__ = f"on_{kind}_job"
        made[kind] = job(registry=registry)(record)
    return made


@pytest.fixture
def rows(registry: Registry) -> JobDefinition[Any]:
    @job(registry=registry, retry=False)
    def import_rows(chunk: list[int]) -> None:
        if chunk[0] < 0:
            raise JobFailed(f"row {chunk[0]} is negative")
        time.sleep(0.01)

    return import_rows


def with_every_callback(tracking: Tracking, job: JobDefinition[Any], items: Iterable[Any]) -> TaskView:
    """A task of ``job`` over ``items`` with the three kinds of callback (``kinds``' jobs)."""
    return tracking.create_task(
        job, items, on_complete="on_complete_job", on_success="on_success_job", on_failure="on_failure_job"
    )


def start_tracked(start_worker: Callable[..., Worker]) -> Worker:
    return start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")


def ended_events(engine: Engine, task_id: str) -> float:
    """When the task's last job ended (epoch seconds)."""
    with engine.connect() as connection:
        last = connection.execute(
            select(Event.finished_at).where(Event.task_id == task_id).order_by(Event.finished_at.desc())
        ).first()
    assert last is not None and last[0] is not None
    return float(last[0].timestamp())


def test_a_task_that_succeeds_calls_complete_and_success_once(
    tracking: Tracking,
    rows: JobDefinition[Any],
    kinds: dict[str, JobDefinition[Any]],
    calls: Calls,
    engine: Engine,
    start_worker: Callable[..., Worker],
) -> None:
    task = tracking.create_task(
        rows,
        range(12),
        chunk_size=3,
        meta={"import": 7},
        on_complete=kinds["complete"],
        on_success="on_success_job",
        on_failure=kinds["failure"],
        callback_args=["seller@example.com", 7],
    )
    start_tracked(start_worker)
    wait_until(lambda: calls.of("complete") and calls.of("success"), 20)
    summary, *rest = calls.of("success")[0]
    assert rest == ["seller@example.com", 7]
    assert summary["task_id"] == task.id and summary["status"] == "finished"
    assert summary["counts"]["finish"] == 4 and summary["total"] == 4
    assert summary["meta"] == {"import": 7} and summary["first_errors"] == []
    # Each started after the task's last job ended.
    last = ended_events(engine, task.id)
    assert all(at >= last for at, _ in calls.seen["complete"] + calls.seen["success"])
    time.sleep(0.5)
    assert len(calls.of("complete")) == 1 and len(calls.of("success")) == 1
    assert calls.of("failure") == []
    view = tracking.get_task(task.id)
    assert {c.kind: c.state for c in view.callbacks} == {
        "complete": "pushed",
        "success": "pushed",
        "failure": "waiting",
    }


def test_a_task_with_a_failed_job_calls_complete_and_failure(
    tracking: Tracking,
    rows: JobDefinition[Any],
    kinds: dict[str, JobDefinition[Any]],
    calls: Calls,
    start_worker: Callable[..., Worker],
) -> None:
    task = with_every_callback(tracking, rows, [1, 2, -3, 4])
    start_tracked(start_worker)
    wait_until(lambda: calls.of("complete") and calls.of("failure"), 20)
    [[summary]] = calls.of("failure")
    assert summary["status"] == "finished_with_errors" and summary["counts"]["failed"] == 1
    assert [e["error"] for e in summary["first_errors"]] == ["row -3 is negative"]
    time.sleep(0.5)
    assert len(calls.of("complete")) == 1 and calls.of("success") == []
    assert wait_for_task(tracking, task.id).status == "finished_with_errors"


def test_a_task_cancelled_with_nothing_running_calls_back_at_once(
    tracking: Tracking,
    rows: JobDefinition[Any],
    kinds: dict[str, JobDefinition[Any]],
    calls: Calls,
    start_worker: Callable[..., Worker],
) -> None:
    task = with_every_callback(tracking, rows, range(6))
    tracking.cancel_task(task.id)
    start_tracked(start_worker)
    wait_until(lambda: calls.of("complete") and calls.of("failure"), 20)
    assert calls.of("failure")[0][0]["status"] == "cancelled"
    time.sleep(0.5)
    assert calls.of("success") == [] and len(calls.of("complete")) == 1


def test_a_callback_is_pushed_once_and_a_second_look_pushes_nothing(
    tracking: Tracking,
    rows: JobDefinition[Any],
    kinds: dict[str, JobDefinition[Any]],
    calls: Calls,
    engine: Engine,
    settings: Settings,
    start_worker: Callable[..., Worker],
) -> None:
    task = tracking.create_task(rows, range(3), on_complete="on_complete_job")
    tracking.cancel_task(task.id)
    queue = Queue("default", settings=settings)
    # Three cancelled jobs and the callback.
    wait_until(lambda: queue.size == 4, 10)
    pusher = callback_pusher(tracking.client.broker)
    assert pusher.push_due(engine) == 0 and queue.size == 4
    if settings.uses_redis:
        # A flusher that died after its push, before it marked the callback pushed: the next one
        # finds it due, and its push finds the marker.
        with engine.begin() as connection:
            connection.execute(update(TaskCallback).values(state=callbacks.DUE))
        pusher.push_due(engine)
        assert queue.size == 4
        assert [c.state for c in tracking.get_task(task.id).callbacks] == ["pushed"]
    start_tracked(start_worker)
    wait_until(lambda: calls.of("complete"), 20)
    time.sleep(0.5)
    assert len(calls.of("complete")) == 1


def test_a_task_retried_to_success_calls_success_then_and_nothing_again(
    tracking: Tracking,
    registry: Registry,
    kinds: dict[str, JobDefinition[Any]],
    calls: Calls,
    start_worker: Callable[..., Worker],
) -> None:
    broken = threading.Event()
    broken.set()

    @job(registry=registry, retry=False)
    def sometimes(chunk: list[int]) -> None:
        if chunk[0] == 2 and broken.is_set():
            raise JobFailed("not yet")

    task = with_every_callback(tracking, sometimes, range(4))
    start_tracked(start_worker)
    wait_until(lambda: calls.of("complete") and calls.of("failure"), 20)
    assert calls.of("success") == []
    broken.clear()
    tracking.retry_task(task.id)
    wait_until(lambda: calls.of("success"), 20)
    assert calls.of("success")[0][0]["status"] == "finished"
    time.sleep(0.5)
    assert [len(calls.of(kind)) for kind in callbacks.KINDS] == [1, 1, 1]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"on_complete": "nowhere"}, "nowhere"),
        ({"callback_args": [1]}, "callback_args needs on_complete"),
        ({"on_success": "summary_only", "callback_args": [1]}, "cannot take 2 argument"),
        ({"on_failure": "keyed_callback"}, "concurrency key, rate limit or unique key"),
    ],
)
def test_a_callback_that_cannot_run_is_refused_before_anything_is_written(
    tracking: Tracking,
    rows: JobDefinition[Any],
    kinds: dict[str, JobDefinition[Any]],
    registry: Registry,
    engine: Engine,
    given: dict[str, Any],
    message: str,
) -> None:
    @job(registry=registry, unique_for=60)
    def keyed_callback(summary: dict[str, Any]) -> None: ...

    @job(registry=registry)
    def summary_only(summary: dict[str, Any]) -> None: ...

    with pytest.raises(Exception, match=message):
        tracking.create_task(rows, range(3), **given)
    with engine.connect() as connection:
        assert connection.execute(select(TaskCallback.id)).all() == []
        assert connection.execute(select(Event.id)).all() == []
