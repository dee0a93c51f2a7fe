"""Tasks that wait for tasks on every broker: a task created ``after`` others is visible at once,
its jobs held until every parent ended, then run, or cancelled when a parent did not succeed
and it runs only on success."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, update

from asynctask import JobFailed, Registry, TaskWaiting, Tracking, each, job, step
from asynctask.brokers import hold_releaser
from asynctask.job import JobDefinition
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.tracking import parents
from asynctask.tracking.models import Task
from asynctask.worker import Worker
from tests.conftest import wait_until
from tests.tracking_fixtures import wait_for_task


class Runs:
    """When each task's jobs started and ended, by the task tag in their items."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: dict[str, list[float]] = {}
        self.ended: dict[str, list[float]] = {}

    def add(self, into: dict[str, list[float]], tag: str) -> None:
        with self.lock:
            into.setdefault(tag, []).append(time.time())

    def first_start(self, tag: str) -> float:
        with self.lock:
            return min(self.started[tag])

    def last_end(self, tag: str) -> float:
        with self.lock:
            return max(self.ended[tag])

    def ran(self, tag: str) -> int:
        with self.lock:
            return len(self.started.get(tag, []))


@pytest.fixture
def runs() -> Runs:
    return Runs()


@pytest.fixture
def step_job(registry: Registry, runs: Runs) -> JobDefinition[Any]:
    def one(item: dict[str, Any]) -> None:
        if item["fail"]:
            raise JobFailed(f"{item['tag']} has a bad row")

    @job(registry=registry, retry=False)
    def workflow_step(chunk: list[dict[str, Any]]) -> None:
        tag = chunk[0]["tag"]
        runs.add(runs.started, tag)
        time.sleep(0.02)
        # Item by item: a bad row is a failed item, its job ends well.
        each(chunk, one)
        runs.add(runs.ended, tag)

    return workflow_step


def items(tag: str, count: int = 6, *, fail: bool = False) -> list[dict[str, Any]]:
    return [{"tag": tag, "n": n, "fail": fail and n == count - 1} for n in range(count)]


def start_tracked(start_worker: Callable[..., Worker]) -> Worker:
    return start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")


def ended(tracking: Tracking, task_id: str) -> bool:
    return tracking.get_task(task_id).finished_at is not None


def test_a_chain_runs_each_task_after_the_last_job_of_the_one_before(
    tracking: Tracking, step_job: JobDefinition[Any], runs: Runs, start_worker: Callable[..., Worker]
) -> None:
    first, second, third = tracking.chain(
        step(step_job, items("first"), chunk_size=2),
        step(step_job, items("second")),
        step(step_job, items("third"), chunk_size=3),
    )
    assert (second.status, second.hold, second.run_if) == ("pending", "waiting", "success")
    assert tracking.list_events(second.id).items[0].messages[0].text == f"waiting for task {first.id}"
    start_tracked(start_worker)
    wait_until(lambda: ended(tracking, third.id), 30)
    assert runs.first_start("second") >= runs.last_end("first")
    assert runs.first_start("third") >= runs.last_end("second")
    wait_until(lambda: tracking.get_task(third.id).hold == "released", 10)
    view = tracking.get_task(second.id)
    assert view.status == "finished" and view.hold == "released"
    assert [(p.task_id, p.succeeded) for p in view.parents] == [(first.id, True)]
    assert [(c.task_id, c.hold) for c in view.children] == [(third.id, "released")]
    assert view.feed is not None and not view.feed.paused
    assert tracking.get_task(first.id).children_count == 1


def test_a_failed_item_cancels_the_rest_of_a_chain_naming_the_parent(
    tracking: Tracking,
    step_job: JobDefinition[Any],
    registry: Registry,
    runs: Runs,
    start_worker: Callable[..., Worker],
) -> None:
    failures: list[dict[str, Any]] = []

    @job(registry=registry)
    def on_chain_failure(summary: dict[str, Any]) -> None:
        failures.append(summary)

    first, second, third = tracking.chain(
        step(step_job, items("first", fail=True)),
        step(step_job, items("second")),
        step(step_job, items("third"), on_failure="on_chain_failure"),
    )
    start_tracked(start_worker)
    wait_until(lambda: ended(tracking, third.id) and failures, 30)
    of_first = tracking.get_task(first.id)
    assert of_first.status == "finished_with_errors"
    assert (of_first.counts["failed"], of_first.items.failed) == (0, 1)
    # The broker drops the held jobs once the end is committed (Redis: right after).
    wait_until(lambda: {tracking.get_task(t.id).hold for t in (second, third)} == {"dropped"}, 10)
    for child, parent in ((second, first), (third, second)):
        view = tracking.get_task(child.id)
        assert view.status == "cancelled"
        ended_as = "finished_with_errors" if parent is first else "cancelled"
        assert view.cancel_reason == f"task {parent.id} ended {ended_as}"
        assert view.counts["cancelled"] == view.total
    # The cancelled task's own callback fired; nothing of the cancelled tasks ran.
    assert [f["task_id"] for f in failures] == [third.id]
    time.sleep(0.5)
    assert runs.ran("second") == runs.ran("third") == 0
    assert tracking.client.broker.feeds.state(second.id) is None


def test_run_if_complete_runs_after_a_parent_that_failed(
    tracking: Tracking, step_job: JobDefinition[Any], runs: Runs, start_worker: Callable[..., Worker]
) -> None:
    _, second = tracking.chain(
        step(step_job, items("first", fail=True)), step(step_job, items("second")), run_if="complete"
    )
    start_tracked(start_worker)
    assert wait_for_task(tracking, second.id, timeout=30).status == "finished"
    assert runs.first_start("second") >= runs.last_end("first")
    assert [p.succeeded for p in tracking.get_task(second.id).parents] == [False]


def test_a_dag_of_six_tasks_starts_each_after_every_parent_ended(
    tracking: Tracking, step_job: JobDefinition[Any], runs: Runs, start_worker: Callable[..., Worker]
) -> None:
    # Two diamonds: a -> (b, c) -> d, and d -> (e, f), f also after b.
    edges = {"b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["d"], "f": ["d", "b"]}
    ids = {"a": tracking.create_task(step_job, items("a")).id}
    for tag, before in edges.items():
        ids[tag] = tracking.create_task(step_job, items(tag), after=[ids[p] for p in before]).id
    start_tracked(start_worker)
    wait_until(lambda: all(ended(tracking, i) for i in ids.values()), 40)
    for tag, before in edges.items():
        for parent in before:
            assert runs.first_start(tag) >= runs.last_end(parent), (tag, parent)
    assert all(tracking.get_task(i).status == "finished" for i in ids.values())


def test_an_unknown_parent_is_refused_before_anything_is_written(
    tracking: Tracking, step_job: JobDefinition[Any], engine: Engine
) -> None:
    known = tracking.create_task(step_job, items("known")).id
    with pytest.raises(parents.UnknownParent) as refused:
        tracking.create_task(step_job, items("orphan"), after=[known, "f" * 32])
    assert refused.value.task_id == "f" * 32
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(Task)).scalar_one() == 1
        assert connection.execute(select(Task.children).where(Task.id == known)).scalar_one() == 0
    # Another tenant's task is no parent either.
    with pytest.raises(parents.UnknownParent):
        tracking.create_task(step_job, items("orphan"), after=[known], tenant="other")


def test_a_task_after_ended_parents_runs_or_is_cancelled_as_it_is_created(
    tracking: Tracking, step_job: JobDefinition[Any], runs: Runs, start_worker: Callable[..., Worker]
) -> None:
    good = tracking.create_task(step_job, items("good"))
    bad = tracking.create_task(step_job, items("bad", fail=True))
    start_tracked(start_worker)
    wait_for_task(tracking, good.id, timeout=20)
    wait_for_task(tracking, bad.id, timeout=20)
    after_good = tracking.create_task(step_job, items("after_good"), after=[good.id])
    after_bad = tracking.create_task(step_job, items("after_bad"), after=[good.id, bad.id])
    assert after_bad.status == "cancelled"
    assert after_bad.cancel_reason == f"task {bad.id} ended finished_with_errors"
    assert wait_for_task(tracking, after_good.id, timeout=20).status == "finished"
    time.sleep(0.3)
    assert runs.ran("after_bad") == 0 and tracking.get_task(after_bad.id).hold == "dropped"


def test_cancelling_a_parent_cancels_its_waiting_children_and_their_feed_waits(
    tracking: Tracking, step_job: JobDefinition[Any], runs: Runs, start_worker: Callable[..., Worker]
) -> None:
    parent = tracking.create_task(step_job, items("parent"))
    child = tracking.create_task(step_job, items("child"), after=[parent.id], parallel=2)
    with pytest.raises(TaskWaiting):
        tracking.resume_task(child.id)
    # Its other settings may change while it waits.
    assert tracking.update_task(child.id, parallel=3) is not None
    tracking.cancel_task(parent.id)
    view = tracking.get_task(child.id)
    assert view.status == "cancelled" and view.cancel_reason == f"task {parent.id} ended cancelled"
    start_tracked(start_worker)
    time.sleep(0.5)
    assert runs.ran("child") == 0


def test_a_hold_a_process_left_due_is_released_by_the_next_look(
    tracking: Tracking, step_job: JobDefinition[Any], engine: Engine, start_worker: Callable[..., Worker]
) -> None:
    parent = tracking.create_task(step_job, items("parent"))
    child = tracking.create_task(step_job, items("child"), after=[parent.id])
    # As a process that died after the parent's end committed, before it resumed the feed.
    with engine.begin() as connection:
        connection.execute(update(Task).where(Task.id == child.id).values(hold=parents.RELEASING))
    releaser = hold_releaser(tracking.client.broker)
    assert releaser.release_due(engine) == 1
    assert releaser.release_due(engine) == 0
    start_tracked(start_worker)
    assert wait_for_task(tracking, child.id, timeout=20).status == "finished"


def test_a_parent_that_ends_while_its_child_is_published_leaves_the_release_to_the_creator(
    tracking: Tracking,
    step_job: JobDefinition[Any],
    monkeypatch: pytest.MonkeyPatch,
    start_worker: Callable[..., Worker],
) -> None:
    parent = tracking.create_task(step_job, items("parent"))
    broker = tracking.client.broker
    staging_of = broker.staging

    def staging(*args: Any) -> Any:
        made = staging_of(*args)
        publish = made.publish

        def parent_ends_first() -> int:
            # Committed, not published (Redis: the broker holds no feed of the child yet).
            tracking.cancel_task(parent.id)
            return publish()

        made.publish = parent_ends_first  # type: ignore[method-assign]
        return made

    monkeypatch.setattr(broker, "staging", staging)
    child = tracking.create_task(step_job, items("child"), after=[parent.id], run_if="complete")
    monkeypatch.undo()
    assert tracking.get_task(child.id).hold == "released"
    start_tracked(start_worker)
    assert wait_for_task(tracking, child.id, timeout=20).status == "finished"


def test_every_due_hold_is_released_at_once_however_many_batches_they_take(
    tracking: Tracking, step_job: JobDefinition[Any], engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parents, "RELEASE_BATCH", 2)
    parent = tracking.create_task(step_job, items("parent", 2))
    children = [tracking.create_task(step_job, items(f"child{n}", 2), after=[parent.id]).id for n in range(5)]
    # As the parent's end leaves them, in the transaction that ended it.
    with engine.begin() as connection:
        connection.execute(update(Task).where(Task.id.in_(children)).values(hold=parents.RELEASING))
    broker = tracking.client.broker
    if broker.backend == "sql":
        # The SQL broker acts in that transaction: all of them, before it commits.
        with broker.store.write() as tx:  # type: ignore[attr-defined]
            assert broker.store.holds.release_in(tx.connection, children) == 5  # type: ignore[attr-defined]
    else:
        assert hold_releaser(broker).release_due(engine, children) == 5
    assert {tracking.get_task(child).hold for child in children} == {"released"}
