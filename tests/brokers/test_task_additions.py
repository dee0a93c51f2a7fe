"""Jobs that add work to their own task, on every broker: the task grows, and ends only once
what was added has ended; a job run again adds nothing twice; what cannot take additions
refuses them, writing nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import OperationalError

from asynctask import Registry, TaskStateError, Tracking, current_job, job
from asynctask.brokers import addition_pusher
from asynctask.brokers.redis.additions import RedisAdditionPusher
from asynctask.context import Iteration, JobContext
from asynctask.fairness import share_of
from asynctask.job import JobDefinition
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.settings import Settings
from asynctask.tracking import additions
from asynctask.tracking.models import Event, TaskAddition
from asynctask.tracking.views import TaskView
from asynctask.worker import Worker
from asynctask.worker.additions import WorkerAdder
from tests.conftest import wait_until
from tests.tracking_fixtures import wait_for_task

ROWS = 50_000
PER_JOB = 1_000


def start_tracked(start_worker: Callable[..., Worker], **extra: Any) -> Worker:
    return start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread", **extra)


class Watch:
    """Views of a task read over and over while it runs, with the time each was read."""

    def __init__(self, tracking: Tracking, task_id: str) -> None:
        self.seen: list[tuple[float, TaskView]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(tracking, task_id), daemon=True)
        self._thread.start()

    def _run(self, tracking: Tracking, task_id: str) -> None:
        while not self._stop.wait(0.01):
            self.seen.append((time.time(), tracking.get_task(task_id)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_an_export_that_counts_its_rows_then_adds_their_jobs_ends_after_the_last_of_them(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    ended: list[float] = []
    added: list[list[str]] = []

    @job(registry=registry)
    def export_rows(rows: list[int]) -> None:
        time.sleep(0.01)
        ended.append(time.time())

    @job(registry=registry)
    def count_rows(chunk: list[dict[str, int]]) -> None:
        rows = range(chunk[0]["rows"])
        added.append(current_job().task.add(rows, job=export_rows, chunk_size=PER_JOB))

    task = tracking.create_task(count_rows, [{"rows": ROWS}])
    watch = Watch(tracking, task.id)
    try:
        start_tracked(start_worker, concurrency=4)
        view = wait_for_task(tracking, task.id, timeout=60)
    finally:
        watch.stop()
    assert view.status == "finished"
    assert (view.total, view.counts["finish"]) == (1 + ROWS // PER_JOB, 1 + ROWS // PER_JOB)
    assert (view.items.total, view.items.done) == (1 + ROWS, 0)
    assert len(added) == 1 and len(added[0]) == ROWS // PER_JOB
    assert len(ended) == ROWS // PER_JOB
    # Never shown done before the last added job ended; shown grown while they ran.
    done_at = [at for at, seen in watch.seen if seen.finished_at is not None or seen.status == "finished"]
    assert all(at >= max(ended) for at in done_at)
    assert any(seen.total == 51 and seen.status == "running" for _, seen in watch.seen)
    events = tracking.list_events(task.id, limit=100, messages=False).items
    assert {e.job_name for e in events} == {"count_rows", "export_rows"}
    assert sorted(len((e.params or [[]])[0]) for e in events if e.job_name == "export_rows") == [PER_JOB] * 50


def test_a_job_run_again_gets_the_jobs_its_first_run_added_and_adds_nothing(
    tracking: Tracking,
    registry: Registry,
    engine: Engine,
    make_client: Callable[..., Any],
    start_worker: Callable[..., Worker],
) -> None:
    runs: list[list[str]] = []

    @job(registry=registry)
    def added_job(items: list[str]) -> None:
        time.sleep(0.01)

    @job(registry=registry)
    def adder(chunk: list[str]) -> None:
        task = current_job().task
        runs.append(task.add(["a", "b", "c"], job=added_job) + task.add(["d"], job=added_job))

    task = tracking.create_task(adder, ["go"])
    adder_jid = tracking.list_events(task.id).items[0].job_id
    start_tracked(start_worker)
    assert wait_for_task(tracking, task.id, timeout=20).total == 5
    # The same job again, as a worker killed before its end was acknowledged leaves it.
    make_client().push({"class": "adder", "args": [["go"]], "jid": adder_jid, "task": task.id})
    wait_until(lambda: len(runs) == 2, 20)
    view = wait_for_task(tracking, task.id, timeout=20)
    assert runs[0] == runs[1] and len(runs[0]) == 4
    assert (view.status, view.total, view.counts["finish"], view.items.total) == ("finished", 5, 5, 5)
    with engine.connect() as connection:
        rows = connection.execute(select(TaskAddition.call, TaskAddition.state)).all()
    assert sorted(rows) == [(f"{adder_jid}/0", "pushed"), (f"{adder_jid}/1", "pushed")]


def test_an_async_job_adds_while_its_event_loop_runs_on(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    @job(registry=registry)
    async def async_added(items: list[int]) -> None:
        await asyncio.sleep(0.01)

    @job(registry=registry)
    async def async_adder(chunk: list[int]) -> None:
        await current_job().task.aadd(range(chunk[0]), job=async_added, chunk_size=2)

    task = tracking.create_task(async_adder, [7])
    start_tracked(start_worker)
    view = wait_for_task(tracking, task.id, timeout=20)
    assert (view.status, view.total, view.counts["finish"], view.items.total) == ("finished", 5, 5, 8)


def test_a_fed_task_s_added_jobs_join_its_feed_and_keep_to_its_parallel(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    lock = threading.Lock()
    running: list[int] = [0, 0]  # now, most at once

    @job(registry=registry)
    def fed_added(items: list[int]) -> None:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    @job(registry=registry)
    def fed_adder(chunk: list[str]) -> None:
        current_job().task.add(range(12), job=fed_added)

    fed = tracking.create_task(fed_adder, ["go"], parallel=2)
    start_tracked(start_worker, concurrency=8)
    view = wait_for_task(tracking, fed.id, timeout=30)
    assert (view.status, view.total, view.counts["finish"], view.items.total) == ("finished", 13, 13, 13)
    # Never more than two at a time (the adder's own slot counts while it runs), and two at times.
    assert running[1] == 2
    # A task that waited for another has a feed too, which holds nothing back once released.
    parent = tracking.create_task(fed_added, [0])
    waiting = tracking.create_task(fed_adder, ["go"], after=[parent.id])
    view = wait_for_task(tracking, waiting.id, timeout=30)
    assert (view.status, view.total, view.counts["finish"]) == ("finished", 13, 13)


def task_of(tracking: Tracking, definition: JobDefinition[Any], **options: Any) -> str:
    return tracking.create_task(definition, ["first"], **options).id


@pytest.fixture
def plain_job(registry: Registry) -> JobDefinition[Any]:
    @job(registry=registry)
    def plain(items: list[str]) -> None:
        pass

    return plain


@pytest.fixture
def adder_of(settings: Settings, registry: Registry) -> Iterator[WorkerAdder]:
    """What a worker of this test's broker adds with, called as a running job's ``add`` would."""
    adder = WorkerAdder(settings, registry)
    yield adder
    adder.close()


def test_a_call_made_again_returns_the_first_call_s_jobs(
    tracking: Tracking, plain_job: JobDefinition[Any], adder_of: WorkerAdder, engine: Engine
) -> None:
    task_id = task_of(tracking, plain_job)
    first = adder_of(task_id, "jid-1/0", range(5), None, 2)
    again = adder_of(task_id, "jid-1/0", range(7), None, 1)
    assert again == first and len(first) == 3
    view = tracking.get_task(task_id)
    assert (view.total, view.counts["enqueue"], view.items.total) == (4, 4, 6)
    # Another call of the same job (its next, or one after a checkpoint) adds.
    assert len(adder_of(task_id, "jid-1/1", range(5), None, 5)) == 1
    assert tracking.get_task(task_id).total == 5


def test_additions_are_refused_where_they_cannot_run_and_write_nothing(
    tracking: Tracking,
    registry: Registry,
    plain_job: JobDefinition[Any],
    adder_of: WorkerAdder,
    engine: Engine,
) -> None:
    @job(registry=registry, concurrency_key="one")
    def keyed(items: list[str]) -> None:
        pass

    cancelled = task_of(tracking, plain_job)
    tracking.cancel_task(cancelled)
    plain = task_of(tracking, plain_job)
    with pytest.raises(TaskStateError, match="cancelled"):
        adder_of(cancelled, "a/0", ["x"], None, None)
    with pytest.raises(ValueError, match="concurrency key"):
        adder_of(plain, "c/0", ["x"], keyed, None)
    with pytest.raises(TypeError, match="JSON"):
        adder_of(plain, "d/0", [object()], None, None)
    with pytest.raises(ValueError, match="chunk_size"):
        adder_of(plain, "e/0", ["x"], None, 0)
    assert adder_of(plain, "f/0", [], None, None) == []
    with engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(TaskAddition)).scalar_one() == 0
        assert connection.execute(select(func.count()).select_from(Event)).scalar_one() == 2
    assert [tracking.get_task(t).total for t in (cancelled, plain)] == [1, 1]


def test_a_job_whose_task_was_cancelled_while_it_ran_adds_nothing(
    tracking: Tracking, registry: Registry, start_worker: Callable[..., Worker]
) -> None:
    go_on = threading.Event()
    refused: list[str] = []

    @job(registry=registry)
    def late_adder(chunk: list[str]) -> None:
        go_on.wait(20)
        try:
            current_job().task.add(["x", "y"])
        except TaskStateError as exc:
            refused.append(str(exc))

    task = tracking.create_task(late_adder, ["go"])
    start_tracked(start_worker)
    wait_until(lambda: tracking.get_task(task.id).counts["working"] == 1, 20)
    tracking.cancel_task(task.id)
    go_on.set()
    wait_until(lambda: refused, 20)
    assert refused == [f"task {task.id} was cancelled or has ended: nothing was added to it"]
    view = wait_for_task(tracking, task.id, timeout=20)
    assert (view.status, view.total, view.items.total) == ("cancelled", 1, 1)


def test_a_job_outside_a_task_or_runtime_cannot_add(
    tracking: Tracking,
    registry: Registry,
    make_client: Callable[..., Any],
    start_worker: Callable[..., Worker],
) -> None:
    refused: list[str] = []

    @job(registry=registry)
    def lonely() -> None:
        try:
            current_job().task.add(["x"])
        except RuntimeError as exc:
            refused.append(str(exc))

    make_client().push({"class": "lonely", "args": []})
    start_tracked(start_worker)
    wait_until(lambda: refused, 20)
    assert refused == ["this job is not part of a task"]


@pytest.mark.parametrize("parallel", [None, 2])
def test_jobs_a_job_left_unpushed_are_pushed_once_by_the_next_look(
    parallel: int | None,
    tracking: Tracking,
    plain_job: JobDefinition[Any],
    adder_of: WorkerAdder,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    start_worker: Callable[..., Worker],
) -> None:
    task_id = task_of(tracking, plain_job, parallel=parallel)
    pusher = addition_pusher(tracking.client.broker)
    if pusher is None:
        pytest.skip("a SQL broker's added jobs commit with their events: none is left to push")
    client = tracking.client

    def queued() -> int:
        # The task's jobs wait in its share of the fair queue, or are held by its feed.
        if parallel is None:
            return int(client.redis.llen(client.keys.share("default", share_of(task_id, None))))
        state = client.broker.feeds.state(task_id)
        assert state is not None
        return state.held + state.out

    # As a job that died after its push, before it was noted: pushed again, it pushes nothing.
    with monkeypatch.context() as dying:
        dying.setattr(additions, "mark_pushed", _unnoted)
        adder_of(task_id, "pushed/0", range(3), None, 1)
    assert queued() == 4
    with engine.connect() as connection:
        assert connection.execute(select(TaskAddition.state)).scalar_one() == additions.DUE
    assert (pusher.push_due(engine), pusher.push_due(engine), queued()) == (1, 0, 4)
    # As a job whose push failed after its commit: the flusher's next look pushes its jobs.
    with monkeypatch.context() as outage:
        outage.setattr(RedisAdditionPusher, "push_due", _refused)
        adder_of(task_id, "unpushed/0", range(2), None, 1)
    assert queued() == 4
    start_tracked(start_worker)
    view = wait_for_task(tracking, task_id, timeout=30)
    assert (view.status, view.total, view.counts["finish"]) == ("finished", 6, 6)
    with engine.connect() as connection:
        assert set(connection.execute(select(TaskAddition.state)).scalars()) == {additions.PUSHED}


def _refused(*args: Any) -> int:
    raise redis.ConnectionError("Redis is down")


def _unnoted(*args: Any) -> None:
    raise OperationalError("UPDATE asynctask_task_addition", {}, ConnectionError("the database went away"))


def test_a_call_is_known_by_the_job_the_checkpoint_it_reached_and_its_place_since() -> None:
    iteration = Iteration(None, 0)
    run = JobContext({"jid": "j1", "task": "t"}, "default", iteration=iteration)
    assert [run.next_call(), run.next_call()] == ["j1/0", "j1/1"]
    iteration.cursor = "[5]"
    after_five = run.next_call()
    assert after_five.startswith("j1/") and after_five.endswith("/0") and after_five != "j1/0"
    # A run resumed from the same checkpoint makes the same calls.
    again = JobContext({"jid": "j1", "task": "t"}, "default", iteration=Iteration("[5]", 5))
    assert again.next_call() == after_five
    assert JobContext({"jid": "j2", "task": "t"}, "default").next_call() == "j2/0"
