"""The port other runtimes attach through, on every broker: a task whose chunks go out through a
runtime's own client (``tasks.runtime``) and whose runs are recorded by ``AttachedTracking``
ends exactly as a task of AsyncTask's own jobs does.

The runtime here is the smallest one that can be: a list its sender appends to and a loop
that runs what it holds. Celery, RQ and Dramatiq themselves are tested in tests/integrations.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Iterator, Sequence
from typing import NoReturn

import pytest

import asynctask
from asynctask import JobFailed, JobsNotSent, Settings, Tracking, current_job
from asynctask.brokers.redis.flusher import Flusher
from asynctask.integrations import attached as attached_module
from asynctask.integrations.attached import AttachedTracking
from asynctask.tasks import runtime
from asynctask.tasks.runtime import OutgoingJob, PartlySent, RuntimeJob
from tests.conftest import wait_until
from tests.tracking_fixtures import wait_for_task
from webapi.serialize import task_json


class ListRuntime:
    """Sends into a list; ``refuse_after`` makes it take only that many jobs of a batch."""

    def __init__(self) -> None:
        self.queue: list[OutgoingJob] = []
        self.refuse_after: int | None = None

    def send(self, jobs: Sequence[OutgoingJob]) -> None:
        if self.refuse_after is None:
            self.queue.extend(jobs)
            return
        taken = list(jobs[: self.refuse_after])
        self.queue.extend(taken)
        raise PartlySent(len(taken), ConnectionError("the broker went away"))


def handle(chunk: list[int]) -> None:
    number = chunk[0]
    current_job().log(f"handling {number}")
    if number % 5 == 1:
        raise JobFailed(f"{number} is not allowed")
    if number % 5 == 2 and current_job().retry_count is None:
        raise ValueError(f"{number} hiccup")
    if number % 5 == 3:
        raise RuntimeError(f"{number} broke")


def run_all(attached: AttachedTracking, sender: ListRuntime, name: str) -> None:
    """Run every job sent, as a runtime's worker would: a ValueError is retried once."""
    attempts: dict[str, int] = {}
    while sender.queue:
        job = sender.queue.pop(0)
        attempt = attempts.get(job.jid, 0)
        run = attached.run(job.jid, job.task, name, job.args)
        if attempt:
            run.job["retry_count"] = attempt - 1
        if not run.start():
            continue
        with run:
            try:
                handle(*job.args)
            except ValueError as exc:
                run.raised(exc, retry=(attempt + 1, 1) if attempt == 0 else None)
                if attempt == 0:
                    attempts[job.jid] = attempt + 1
                    sender.queue.append(job)
            except Exception as exc:
                run.raised(exc, retry=None)
            else:
                run.finished()
        attached.flush()


@pytest.fixture
def sender() -> ListRuntime:
    return ListRuntime()


@pytest.fixture
def job(sender: ListRuntime, registry: asynctask.Registry) -> RuntimeJob:
    return runtime.register(
        RuntimeJob(handle, "listed.handle", runtime="listed", queue="q", sender=sender), registry
    )


@pytest.fixture
def attached(settings: Settings, tracking: Tracking) -> Iterator[AttachedTracking]:
    made = AttachedTracking(Settings(**{**settings.__dict__, "flusher": "thread"}))
    made.start()
    yield made
    made.close()


def test_a_task_run_by_another_runtime_ends_with_each_job_s_outcome(
    tracking: Tracking, sender: ListRuntime, job: RuntimeJob, attached: AttachedTracking
) -> None:
    task = tracking.create_task(job, range(20))
    assert len(sender.queue) == 20
    assert {sent.task for sent in sender.queue} == {task.id}
    assert task.counts["enqueue"] == 20
    assert task.runtime == "listed"
    assert task_json(task)["runtime"] == "listed"

    run_all(attached, sender, job.name)

    done = wait_for_task(tracking, task.id)
    assert done.counts["finish"] == 12
    assert done.counts["failed"] == 4
    assert done.counts["error"] == 4
    assert done.status == "finished_with_errors"
    events = {(event.params or [])[0][0]: event for event in tracking.list_events(task.id, limit=100).items}
    retried = events[2]
    assert retried.status == "finish"
    assert retried.attempt == 2
    assert [m.text for m in retried.messages] == [
        "started",
        "handling 2",
        "ValueError: 2 hiccup",
        "waiting for retry 1 of 1",
        "started",
        "handling 2",
        "finished",
    ]
    assert events[1].status == "failed"
    assert events[1].error == "1 is not allowed"
    assert events[3].status == "error"
    assert [m.text for m in events[3].messages][-2:] == ["RuntimeError: 3 broke", "no retries left"]


def test_jobs_the_runtime_did_not_take_end_not_sent_and_the_rest_run(
    tracking: Tracking, sender: ListRuntime, job: RuntimeJob, attached: AttachedTracking
) -> None:
    sender.refuse_after = 3
    with pytest.raises(JobsNotSent) as raised:
        tracking.create_task(job, [5 * n for n in range(10)])
    assert (raised.value.sent, raised.value.total) == (3, 10)
    task_id = raised.value.task_id
    assert len(sender.queue) == 3
    run_all(attached, sender, job.name)

    done = wait_for_task(tracking, task_id)
    assert done.counts["finish"] == 3
    assert done.counts["error"] == 7
    unsent = tracking.list_events(task_id, status="error", limit=100).items
    assert {event.error for event in unsent} == {"not sent: the broker went away"}


def test_jobs_of_a_cancelled_task_do_not_run(
    tracking: Tracking, sender: ListRuntime, job: RuntimeJob, attached: AttachedTracking
) -> None:
    task = tracking.create_task(job, [0, 5])
    tracking.cancel_task(task.id)
    first = sender.queue[0]
    run = attached.run(first.jid, first.task, job.name, first.args)
    assert run.start() is False
    attached.flush()
    assert wait_for_task(tracking, task.id).counts["cancelled"] == 2


def test_no_job_starts_after_cancel_task_returned_though_news_is_read_once_a_while(
    tracking: Tracking, sender: ListRuntime, job: RuntimeJob, attached: AttachedTracking
) -> None:
    task = tracking.create_task(job, [0, 5])
    first, second = sender.queue
    # This start reads the news: the next ones in the process reuse it for a while.
    assert attached.run(first.jid, first.task, job.name, first.args).start()
    tracking.cancel_task(task.id)
    assert attached.run(second.jid, second.task, job.name, second.args).start() is False


def test_a_job_that_ran_before_the_cancel_keeps_its_outcome_though_applied_after_it(
    settings: Settings, tracking: Tracking, sender: ListRuntime, job: RuntimeJob
) -> None:
    if not settings.uses_redis:
        pytest.skip("the SQL broker numbers transitions as it applies them: none is applied late")
    # No flusher yet: the job's run waits in the tracking stream, numbered before the cancel.
    attached = AttachedTracking(Settings(**{**settings.__dict__, "flusher": "off"}))
    try:
        task = tracking.create_task(job, [0, 5])
        ran = sender.queue.pop(0)
        run = attached.run(ran.jid, ran.task, job.name, ran.args)
        assert run.start()
        run.finished()
        attached.flush()
        tracking.cancel_task(task.id)
        flusher = Flusher(tracking.client.redis, tracking.client.keys, tracking.engine, "test")
        flusher.start()
        try:
            done = wait_until(lambda: (view := tracking.get_task(task.id)).counts["finish"] == 1 and view, 10)
        finally:
            flusher.stop()
    finally:
        attached.close()
    assert (done.counts["finish"], done.counts["cancelled"]) == (1, 1)


def test_failed_jobs_are_sent_again_through_their_runtime(
    tracking: Tracking, sender: ListRuntime, job: RuntimeJob, attached: AttachedTracking
) -> None:
    task = tracking.create_task(job, [1, 5])
    run_all(attached, sender, job.name)
    assert wait_for_task(tracking, task.id).counts["failed"] == 1

    assert tracking.retry_task(task.id) == 1
    assert [sent.args for sent in sender.queue] == [[[1]]]
    assert tracking.get_task(task.id).counts["enqueue"] == 1


def test_another_runtime_s_job_is_not_pushed_to_asynctask_s_queues(job: RuntimeJob) -> None:
    with pytest.raises(TypeError, match="runs on listed"):
        job.perform_async([1])


def test_create_task_takes_a_runtime_s_own_job_object_through_an_adapter(
    tracking: Tracking, sender: ListRuntime, job: RuntimeJob
) -> None:
    class Foreign:
        pass

    foreign = Foreign()

    def adapt(obj: object) -> RuntimeJob | None:
        return job if obj is foreign else None

    runtime.add_adapter(adapt)
    try:
        task = tracking.create_task(foreign, [0])
    finally:
        runtime._adapters.remove(adapt)
    assert task.job_name == "listed.handle"
    assert [sent.task for sent in sender.queue] == [task.id]
    with pytest.raises(TypeError, match=r"import asynctask\.integrations"):
        tracking.create_task(Foreign(), [0])


def test_a_forked_child_records_through_the_broker_its_parent_opened(
    settings: Settings, tracking: Tracking, sender: ListRuntime, job: RuntimeJob, attached: AttachedTracking
) -> None:
    if not settings.uses_redis:
        pytest.skip("a SQL engine's pooled connections cannot be shared with a fork: the child opens its own")
    task = tracking.create_task(job, [0, 5])
    first, second = sender.queue
    assert attached.run(first.jid, first.task, job.name, first.args).start()
    opened = attached.run(first.jid, first.task, job.name, first.args).tracker.store
    child = os.fork()
    if child == 0:
        # An RQ work horse: nothing but this run, then out without any cleanup.
        code = 1
        try:
            run = attached.run(second.jid, second.task, job.name, second.args)
            assert run.start()
            run.finished()
            attached.flush()
            code = 0 if run.tracker.store is opened else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    wait_until(lambda: tracking.get_task(task.id).counts["finish"] == 1, 10)


def test_a_child_forked_for_one_job_records_with_what_its_parent_prepared(
    settings: Settings,
    tracking: Tracking,
    sender: ListRuntime,
    job: RuntimeJob,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not settings.uses_redis:
        pytest.skip("a SQL engine's pooled connections cannot be shared with a fork: the child opens its own")
    # News that stays fresh through the test: on a loaded machine the fork and the child's first
    # steps may take longer than the 50 ms after which a child rightly asks again.
    monkeypatch.setattr(attached_module, "CANCEL_NEWS_AGE", 30.0)
    made = AttachedTracking(Settings(**{**settings.__dict__, "flusher": "thread"}))
    made.start(forks_per_job=True)
    try:
        task = tracking.create_task(job, [0, 5])
        first, second = sender.queue
        made.before_fork()
        child = os.fork()
        if child == 0:
            # An RQ work horse: its tracking was built by its parent, which read the
            # cancellation news just before the fork; it starts no thread it does not need.
            code = 1
            try:

                def asked() -> NoReturn:
                    raise AssertionError("the child asked the store for cancellations")

                run = made.run(first.jid, first.task, job.name, first.args)
                run.tracker.store.cancel_generation = asked  # type: ignore[method-assign]
                run.tracker.store.cancelled_tasks = asked  # type: ignore[method-assign]
                assert run.start()
                run.finished()
                made.flush()
                assert threading.active_count() == 1
                run = made.run(second.jid, second.task, job.name, second.args)
                assert run.start()
                made.flush()
                with run:
                    current_job().log("on its way")
                    # Written while the job runs, with no flush: the sender started for it.
                    wait_until(lambda: not len(run.tracker.outbox), 5)
                assert threading.active_count() == 2
                run.finished()
                made.flush()
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        wait_until(lambda: tracking.get_task(task.id).counts["finish"] == 2, 10)
        logged = [m.text for event in tracking.list_events(task.id).items for m in event.messages]
        assert "on its way" in logged
    finally:
        made.close()
