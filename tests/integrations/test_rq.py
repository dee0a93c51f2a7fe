"""RQ jobs tracked as AsyncTask tasks: real ``rq worker`` processes with
``-w asynctask.integrations.rq.TrackedWorker``, tasks sent through RQ's own client
(``Queue.enqueue_many``) by ``create_task`` and the HTTP API, tracking applied to PostgreSQL.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from rq.command import send_stop_job_command
from rq.job import Job
from rq.registry import CanceledJobRegistry, FailedJobRegistry
from rq.worker import SpawnWorker

from asynctask import Client, TaskView, Tracking, default_registry
from asynctask.db.engine import create_database_engine
from asynctask.integrations.rq import TASK_META, TrackingWorkerMixin
from asynctask.middleware import Chain
from asynctask.tokens import create_token
from tests.conftest import wait_until
from tests.integrations import rq_jobs
from tests.integrations.rq_support import RqStack, rq_stack
from tests.records import written_lines
from tests.tracking_fixtures import wait_for_task
from tests.webapi.conftest import close_watchers
from webapi import create_app

#: 100 items: every tenth (3, 13, ...) crashes, three in twenty are refused, the rest succeed.
KINDS = {n: "error" if n % 10 == 3 else "failed" if n % 20 in (5, 9, 16) else "ok" for n in range(100)}


@pytest.fixture
def stack(claimed_db: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RqStack]:
    with rq_stack(claimed_db, tmp_path) as made:
        # The sender of submittable() reads RQ's URL when it sends.
        monkeypatch.setenv("RQ_REDIS_URL", made.rq_url)
        yield made


@pytest.fixture
def tracking(stack: RqStack) -> Iterator[Tracking]:
    client = Client(stack.settings, registry=default_registry, middleware=Chain())
    engine = create_database_engine(stack.settings.database_url)
    yield Tracking(client, engine)
    client.broker.close()
    engine.dispose()


@pytest.fixture
def app(tracking: Tracking) -> Iterator[Flask]:
    made = create_app(
        {"settings": tracking.client.settings, "token_cache_seconds": 0.0},
        client=tracking.client,
        engine=tracking.engine,
    )
    made.testing = True
    yield made
    close_watchers([made])


def settled(tracking: Tracking, task_id: str) -> TaskView:
    """The task once none of its jobs waits or runs: a cancelled task reads ``cancelled`` at once,
    while a job that had started still runs to its end."""

    def quiet() -> TaskView | None:
        view = tracking.get_task(task_id)
        return view if view.counts["enqueue"] == view.counts["working"] == 0 else None

    found: TaskView = wait_until(quiet, 30, interval=0.05)
    return found


def texts(event: dict[str, Any]) -> list[str]:
    return [message["text"] for message in event["messages"]]


def test_a_task_posted_to_the_api_ends_with_each_rq_job_s_outcome(
    stack: RqStack, tracking: Tracking, app: Flask
) -> None:
    stack.spawn_worker()
    token = create_token(tracking.engine, "acme").token
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
    body = "".join(json.dumps({"n": n, "kind": kind}) + "\n" for n, kind in KINDS.items())
    http = app.test_client()
    created = http.post("/api/tasks?job=rq_mixed&chunk_size=1", data=body, headers=headers)
    assert created.status_code == 202, created.get_json()
    task_id = created.get_json()["task_id"]

    def settled() -> dict[str, Any] | None:
        task: dict[str, Any] = http.get(f"/api/tasks/{task_id}?errors=100", headers=headers).get_json()
        return task if task["status"] == "finished_with_errors" else None

    task = wait_until(settled, 45, interval=0.1)
    assert task["counts"] == {
        "enqueue": 0,
        "working": 0,
        "finish": 75,
        "failed": 15,
        "error": 10,
        "cancelled": 0,
        "stopped": 0,
        "lost": 0,
    }
    assert task["done"] == 100
    refused = sorted(n for n, kind in KINDS.items() if kind == "failed")
    crashed = sorted(n for n, kind in KINDS.items() if kind == "error")
    # The first errors of the task, as GET /api/tasks/<id> lists them: every refused item's
    # message, and every crash with RQ's last attempt.
    errors = {event["params"][0][0]["n"]: event for event in task["errors"]}
    assert sorted(errors) == sorted(refused + crashed)
    for n in refused:
        assert (errors[n]["status"], errors[n]["error"], errors[n]["attempt"]) == (
            "failed",
            f"item {n} refused",
            1,
        )
        assert errors[n]["error_class"] == "asynctask.JobFailed"
    for n in crashed:
        assert (errors[n]["status"], errors[n]["error"], errors[n]["attempt"]) == (
            "error",
            f"RuntimeError: item {n} broke",
            3,
        )

    events = http.get(f"/api/tasks/{task_id}/events?limit=100", headers=headers).get_json()["items"]
    by_item = {event["params"][0][0]["n"]: event for event in events}
    assert len(by_item) == 100
    for n, kind in KINDS.items():
        event = by_item[n]
        run = ["started", f"item {n}: {kind}"]
        if kind == "ok":
            assert (event["status"], event["attempt"], event["progress"]) == (
                "finish",
                1,
                {"done": 1, "total": 1},
            )
            assert texts(event)[-3:] == [*run, "finished"]
        elif kind == "failed":
            assert (event["status"], event["attempt"]) == ("failed", 1)
            assert texts(event)[-3:] == [*run, f"item {n} refused"]
        else:
            crash = f"RuntimeError: item {n} broke"
            assert (event["status"], event["attempt"]) == ("error", 3)
            assert texts(event)[-12:] == [
                *run,
                crash,
                "waiting for retry 1 of 2",
                *run,
                crash,
                "waiting for retry 2 of 2",
                *run,
                crash,
                "no retries left",
            ]

    # RQ's own view agrees: a refused job ran once although it was sent with Retry(max=2), and
    # every one that failed is in RQ's failed registry.
    runs = Counter(stack.starts())
    assert len(runs) == 100
    assert sorted(runs[event["job_id"]] for event in events) == [1] * 90 + [3] * 10
    assert all(runs[by_item[n]["job_id"]] == 1 for n in refused)
    failed = set(FailedJobRegistry(queue=stack.queue).get_job_ids())
    assert failed == {by_item[n]["job_id"] for n in refused + crashed}


def test_create_task_takes_the_function_itself_and_sends_its_chunks_to_rq(
    stack: RqStack, tracking: Tracking
) -> None:
    task = tracking.create_task(rq_jobs.slow, range(7), chunk_size=3)
    assert (task.job_name, task.total) == ("rq_slow", 3)
    ids = stack.queue.get_job_ids()
    assert len(ids) == 3
    jobs = [Job.fetch(jid, connection=stack.conn) for jid in ids]
    # Each chunk is an RQ job whose id is its event's job id, carrying its task and RQ's Retry.
    events = {event.job_id: event for event in tracking.list_events(task.id).items}
    assert set(ids) == set(events)
    assert [list(job.args) for job in jobs] == [[[0, 1, 2]], [[3, 4, 5]], [[6]]]
    assert {job.meta[TASK_META] for job in jobs} == {task.id}
    assert {job.retries_left for job in jobs} == {2}
    assert {job.func_name for job in jobs} == {"tests.integrations.rq_jobs.slow"}

    stack.spawn_worker(RQ_TEST_SLOW="0")
    done = wait_for_task(tracking, task.id)
    assert done.counts["finish"] == 3
    assert done.status == "finished"


def test_jobs_of_a_cancelled_task_never_start(stack: RqStack, tracking: Tracking) -> None:
    task = tracking.create_task(rq_jobs.slow, range(30))
    stack.spawn_worker(RQ_TEST_SLOW="0.2")
    wait_until(lambda: len(stack.starts()) >= 3, 30)
    tracking.cancel_task(task.id)
    # A job may have passed its start, and be running, when the task was cancelled: that one
    # finishes; no other starts.
    started = len(stack.starts()) + 1
    wait_until(lambda: stack.queue.count == 0 and not stack.conn.llen(stack.queue.intermediate_queue_key), 30)
    ran = stack.starts()

    def ended() -> TaskView | None:
        view = tracking.get_task(task.id)
        counts = (view.counts["finish"], view.counts["cancelled"])
        return view if counts == (len(ran), 30 - len(ran)) else None

    # The job that was running may read cancelled for a moment (its start had not reached SQL
    # when the task was cancelled), until its finish, written after, is applied.
    done: TaskView = wait_until(ended, 20, interval=0.05)
    assert len(ran) <= started
    assert done.status == "cancelled"
    assert sum(done.counts.values()) == 30
    skipped = set(CanceledJobRegistry(queue=stack.queue).get_job_ids())
    assert len(skipped) == 30 - len(ran)
    assert not skipped & set(ran)
    # The worker skipped each one at its start: RQ's queue is empty, nothing failed.
    assert FailedJobRegistry(queue=stack.queue).count == 0


def test_a_running_job_sees_its_task_cancelled(stack: RqStack, tracking: Tracking) -> None:
    task = tracking.create_task(rq_jobs.patient, [1, 2])
    stack.spawn_worker()
    # Running as the tracking database sees it: a start still on its way to SQL when the task is
    # cancelled shows the job cancelled until its end arrives.
    wait_until(lambda: tracking.get_task(task.id).counts["working"] == 1, 20)
    tracking.cancel_task(task.id)
    done = settled(tracking, task.id)
    assert done.status == "cancelled"
    assert (done.counts["finish"], done.counts["cancelled"]) == (1, 1)
    ran = next(event for event in tracking.list_events(task.id).items if event.status == "finish")
    assert [m.text for m in ran.messages][-2:] == ["saw the task cancelled", "finished"]
    assert len(stack.starts()) == 1


def test_a_running_job_s_log_and_progress_are_seen_before_it_ends(stack: RqStack, tracking: Tracking) -> None:
    task = tracking.create_task(rq_jobs.halfway, [1])
    stack.spawn_worker()

    def reported() -> bool:
        (event,) = tracking.list_events(task.id).items
        return (
            event.status == "working"
            and [m.text for m in event.messages][-1:] == ["halfway there"]
            and (event.progress_done, event.progress_total) == (1, 2)
        )

    # The work horse writes a job's start and end itself; what the job records in between goes
    # out while it runs.
    wait_until(reported, 20)
    tracking.cancel_task(task.id)
    assert settled(tracking, task.id).counts["finish"] == 1


def test_time_limits_and_stopped_jobs_end_as_rq_ended_them(stack: RqStack, tracking: Tracking) -> None:
    worker = stack.spawn_worker()
    timed = tracking.create_task(rq_jobs.sleepy, [1])
    done = wait_for_task(tracking, timed.id, 30)
    (event,) = tracking.list_events(timed.id).items
    assert (event.status, event.attempt, event.error) == ("error", 2, "timed out after 2 s")
    assert [m.text for m in event.messages][-6:] == [
        "started",
        "timed out after 2 s",
        "waiting for retry 1 of 1",
        "started",
        "timed out after 2 s",
        "no retries left",
    ]
    assert done.status == "finished_with_errors"

    stopped = tracking.create_task(rq_jobs.sleepy, [2])
    (jid,) = [e.job_id for e in tracking.list_events(stopped.id).items]
    wait_until(lambda: jid in stack.starts(), 20)
    stack.horse_of(worker)
    send_stop_job_command(stack.conn, jid)
    wait_until(lambda: tracking.get_task(stopped.id).counts["cancelled"] == 1, 20)
    (event,) = tracking.list_events(stopped.id).items
    assert event.status == "cancelled"
    assert [m.text for m in event.messages][-1] == "stopped by send_stop_job_command"
    # RQ does not retry a stopped job, whatever its Retry.
    assert Job.fetch(jid, connection=stack.conn).get_status() == "stopped"
    assert stack.starts().count(jid) == 1


@pytest.mark.alone
def test_killed_work_horses_and_workers_leave_exact_counts(stack: RqStack, tracking: Tracking) -> None:
    """kill -9 of a work horse, then of a worker with its horse. RQ's worker sees its horse die
    at once and retries the job (Retry(max=2)); a dead worker's job is found by the next
    worker's maintenance once its started-registry entry is past its deadline (at least 60 s
    after its last heartbeat: moved to the past here) and retried too.

    Tracking is applied by an ``asynctask flusher`` of its own (``ASYNCTASK_FLUSHER=off`` in
    the workers), so that the kill tests RQ's handling, not the recovery of a flusher killed
    with its worker (after 60 s; tests/tracking covers it).
    """
    stack.spawn("flusher")
    task = tracking.create_task(rq_jobs.slow, range(12))
    worker = stack.spawn_worker(ASYNCTASK_FLUSHER="off", RQ_TEST_SLOW="1")

    wait_until(lambda: len(stack.starts()) >= 2, 30)
    first = stack.running()
    os.kill(stack.horse_of(worker), signal.SIGKILL)

    # RQ puts a retried job at the back of its queue: the next ones are others.
    wait_until(lambda: len(stack.starts()) >= 4, 30)
    second = stack.running()
    assert second != first
    horse = stack.horse_of(worker)
    os.kill(worker.pid, signal.SIGKILL)
    os.kill(horse, signal.SIGKILL)
    worker.wait(10)
    registry = stack.queue.started_job_registry
    entries = stack.conn.zrange(registry.key, 0, -1)
    assert [entry.decode().split(":")[0] for entry in entries] == [second]
    stack.conn.zadd(registry.key, dict.fromkeys(entries, 1))

    stack.spawn_worker(ASYNCTASK_FLUSHER="off", RQ_TEST_SLOW="0.3")
    done = wait_for_task(tracking, task.id, 45)
    assert done.status == "finished"
    assert done.counts["finish"] == 12
    assert sum(done.counts.values()) == 12
    events = {event.job_id: event for event in tracking.list_events(task.id, limit=100).items}
    lost = [m.text for m in events[first].messages]
    assert events[first].attempt == 2, lost
    assert "worker lost: its work horse was killed by signal 9" in lost
    assert lost[lost.index("worker lost: its work horse was killed by signal 9") + 1] == (
        "waiting for retry 1 of 2"
    )
    abandoned = [m.text for m in events[second].messages]
    assert events[second].attempt == 2
    assert abandoned[-4:] == [
        "worker lost: RQ found the job abandoned",
        "waiting for retry 1 of 2",
        "started",
        "finished",
    ]
    assert all(event.status == "finish" for event in events.values())


def test_the_simple_worker_tracks_jobs_it_runs_in_its_own_process(stack: RqStack, tracking: Tracking) -> None:
    kinds = ["ok", "failed", "error", "ok"]
    task = tracking.create_task(rq_jobs.mixed, [{"n": n, "kind": kind} for n, kind in enumerate(kinds)])
    worker = stack.spawn_worker(worker_class="asynctask.integrations.rq.TrackedSimpleWorker")
    done = wait_for_task(tracking, task.id)
    assert (done.counts["finish"], done.counts["failed"], done.counts["error"]) == (2, 1, 1)
    events = {(event.params or [])[0][0]["n"]: event for event in tracking.list_events(task.id).items}
    assert events[2].attempt == 3
    assert [m.text for m in events[2].messages][-1] == "no retries left"
    # Every run was in the worker process itself: no work horse.
    assert {int(line.split()[2]) for line in written_lines(stack.runs)} == {worker.pid}


def test_a_spawning_worker_class_is_refused_where_it_is_defined() -> None:
    # Its jobs would run in a plain rq.Worker of a new interpreter, untracked.
    with pytest.raises(TypeError, match="SpawnWorker cannot be tracked"):

        class Spawning(TrackingWorkerMixin, SpawnWorker):
            pass


def test_untracked_jobs_run_as_under_rq_s_own_worker(stack: RqStack, tracking: Tracking) -> None:
    job = stack.queue.enqueue(rq_jobs.untracked, 20)
    stack.spawn_worker()
    wait_until(lambda: job.get_status(refresh=True) == "finished", 20)
    assert job.return_value() == 21
    assert tracking.list_tasks(None).items == ()


def test_a_work_horse_records_through_rq_s_own_redis_connection(stack: RqStack, tracking: Tracking) -> None:
    task = tracking.create_task(rq_jobs.redis_connections, [[n] for n in range(3)], chunk_size=1)
    stack.spawn_worker()
    done = wait_for_task(tracking, task.id)
    assert done.counts["finish"] == 3
    # RQ's horse opens one connection of its own; tracking on the same server and database
    # takes it instead of opening a second one, a round trip handshake saved on every job.
    logged = [m.text for event in tracking.list_events(task.id).items for m in event.messages]
    assert logged.count("redis connections: 1") == 3, logged


def test_an_rq_function_is_called_back_once_as_its_task_ends(stack: RqStack, tracking: Tracking) -> None:
    callbacks = {"on_complete": "rq_called_back", "on_success": "rq_called_back"}
    ok = tracking.create_task(rq_jobs.mixed_job, [{"n": 0, "kind": "ok"}], **callbacks)
    failed = tracking.create_task(rq_jobs.mixed_job, [{"n": 1, "kind": "failed"}], **callbacks)
    stack.spawn_worker(worker_class="tests.integrations.rq_jobs.CallbackWorker")
    settled(tracking, ok.id)
    settled(tracking, failed.id)

    def calls() -> list[str]:
        return sorted(
            line.rsplit(" ", 2)[0] for line in written_lines(stack.runs) if line.startswith("called-")
        )

    expected = sorted([f"called-finished {ok.id}"] * 2 + [f"called-finished_with_errors {failed.id}"])
    wait_until(lambda: calls() == expected, 20)
    time.sleep(1)
    assert calls() == expected
