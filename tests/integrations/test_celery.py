"""Celery with AsyncTask tracking attached (``asynctask.integrations.celery``), on real
``celery worker`` processes: tasks submitted through the HTTP API and ``create_task`` end with
exactly the outcomes their jobs had, on the Redis broker and on RabbitMQ (tracking through
Redis, or with no Redis at all through the SQL writer)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import asynctask
from asynctask.integrations.celery import HEADER
from tests.conftest import wait_until
from tests.integrations.celery_jobs import BROKEN, EXPIRES, FAILED, TIME_LIMIT
from tests.integrations.celery_support import SETUPS, CeleryRig, celery_rig


@pytest.fixture(params=SETUPS)
def rig(request: pytest.FixtureRequest, claimed_db: int, tmp_path: Path) -> Iterator[CeleryRig]:
    with celery_rig(str(request.param), claimed_db, tmp_path) as made:
        yield made


@pytest.fixture
def redis_rig(claimed_db: int, tmp_path: Path) -> Iterator[CeleryRig]:
    with celery_rig("redis", claimed_db, tmp_path) as made:
        yield made


def texts(event: dict[str, Any]) -> list[str]:
    return [message["text"] for message in event["messages"]]


def by_item(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {event["params"][0][0]: event for event in events}


def assert_outcomes(rig: CeleryRig, task_id: str, items: range) -> None:
    """Every item of a ``handle``/``explicit`` task ended as ``check`` made it end."""
    task = rig.wait_settled(task_id)
    failed = [n for n in items if n in FAILED]
    broken = [n for n in items if n in BROKEN]
    assert task["status"] == "finished_with_errors"
    assert task["counts"]["finish"] == len(items) - len(failed) - len(broken)
    assert task["counts"]["failed"] == len(failed)
    assert task["counts"]["error"] == len(broken)
    assert task["counts"]["enqueue"] == task["counts"]["working"] == 0
    assert sorted(e["error"] for e in task["errors"] if e["status"] == "failed") == sorted(
        f"item {n} is not allowed" for n in failed
    )
    assert sorted(e["error"] for e in task["errors"] if e["status"] == "error") == sorted(
        f"RuntimeError: item {n} broke" for n in broken
    )
    events = by_item(rig.events(task_id))
    assert sorted(events) == list(items)
    for n, event in events.items():
        if n in FAILED:
            assert (event["status"], event["attempt"]) == ("failed", 1), event
            assert texts(event) == ["started", f"item {n}", f"item {n} is not allowed"]
            assert event["error_class"] == "asynctask.JobFailed"
        elif n in BROKEN:
            crash = f"RuntimeError: item {n} broke"
            assert (event["status"], event["attempt"]) == ("error", 3), event
            assert texts(event) == [
                *("started", f"item {n}", crash, "waiting for retry 1 of 2"),
                *("started", f"item {n}", crash, "waiting for retry 2 of 2"),
                *("started", f"item {n}", crash, "no retries left"),
            ]
        else:
            assert (event["status"], event["attempt"]) == ("finish", 1), event
            assert texts(event) == ["started", f"item {n}", "finished"]


def test_a_hundred_items_through_the_api_end_with_exact_counts(rig: CeleryRig) -> None:
    rig.submittable("celery_jobs.handle")
    rig.start_worker()
    created = rig.post("/api/tasks", {"job": "celery_jobs.handle", "items": list(range(100))})
    assert created.status_code == 202, created.get_data(as_text=True)
    body = created.get_json()
    assert (body["jobs"], body["status"]) == (100, "pending")
    assert_outcomes(rig, body["task_id"], range(100))


def test_job_failed_is_not_retried_by_an_explicit_retry_policy(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    rig.submittable("celery_jobs.explicit")
    rig.start_worker(concurrency=2)
    items = range(20)
    task = rig.create(rig.app.tasks["celery_jobs.explicit"], items)
    assert_outcomes(rig, task.id, items)


def test_retry_through_the_api_sends_the_failed_jobs_again(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    rig.submittable("celery_jobs.picky")
    rig.start_worker(concurrency=2)
    task_id = rig.post("/api/tasks", {"job": "celery_jobs.picky", "items": list(range(6))}).get_json()[
        "task_id"
    ]
    first = rig.wait_settled(task_id)
    assert (first["status"], first["counts"]["finish"], first["counts"]["failed"]) == (
        "finished_with_errors",
        3,
        3,
    )

    Path(f"{rig.runs}.fixed").touch()
    retried = rig.post(f"/api/tasks/{task_id}/retry", {})
    assert retried.status_code == 202, retried.get_data(as_text=True)
    assert retried.get_json()["retried"] == 3

    def all_finished() -> dict[str, Any] | None:
        body: dict[str, Any] = rig.get(f"/api/tasks/{task_id}")
        return body if body["counts"]["finish"] == 6 else None

    done = wait_until(all_finished, 30)
    assert done["status"] == "finished"
    events = by_item(rig.events(task_id))
    for n, event in events.items():
        if n % 2:
            assert (event["attempt"], texts(event)[-2:]) == (2, ["fixed", "finished"]), event
            assert texts(event)[:3] == ["started", "not fixed", f"item {n} is odd"]
        else:
            assert (event["attempt"], texts(event)) == (1, ["started", "not fixed", "finished"])


def test_create_task_takes_a_celery_task_and_its_messages_carry_the_task(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    handle = rig.app.tasks["celery_jobs.handle"]
    task = rig.create(handle, range(4), chunk_size=2, meta={"from": "test"})
    assert (task.total, task.job_name, task.queue) == (2, "celery_jobs.handle", rig.queue)
    with rig.app.connection_for_read() as connection:
        queue = connection.SimpleQueue(rig.queue)
        messages = [queue.get(timeout=5) for _ in range(2)]
        for message in messages:
            message.ack()
        queue.close()
    events = rig.events(task.id)
    assert sorted(m.headers["id"] for m in messages) == sorted(e["job_id"] for e in events)
    assert {m.headers[HEADER] for m in messages} == {task.id}
    assert sorted(m.decode()[0][0] for m in messages) == [[0, 1], [2, 3]]


def test_a_message_without_the_task_header_runs_untracked(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    plain = rig.app.tasks["celery_jobs.plain"]
    rig.start_worker(concurrency=1)
    task = rig.create(plain, [0])
    (event,) = rig.events(task.id)
    untracked = plain.apply_async(args=[[1]]).id

    wait_until(lambda: len(rig.runs_of("tracked")) + len(rig.runs_of("untracked")) == 2, 30)
    assert [jid for jid, _, _ in rig.runs_of("tracked")] == [event["job_id"]]
    assert [jid for jid, _, _ in rig.runs_of("untracked")] == [untracked]
    assert rig.wait_settled(task.id)["counts"]["finish"] == 1
    with rig.engine.connect() as connection:
        found = connection.execute(
            text("SELECT count(*) FROM asynctask_event WHERE job_id = :jid"), {"jid": untracked}
        ).scalar()
    assert found == 0


def test_a_cancelled_task_starts_no_job_afterwards(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    slow = rig.submittable("celery_jobs.slow")
    rig.start_worker(concurrency=2)
    task = rig.create(slow, range(40))
    wait_until(lambda: len(rig.runs_of("start")) >= 4, 30)
    rig.tracking.cancel_task(task.id)
    cancelled_at = time.time()

    assert rig.wait_settled(task.id)["status"] == "cancelled"
    started = rig.runs_of("start")
    ran = {jid for jid, _, _ in started}

    def settled() -> list[dict[str, Any]] | None:
        events = rig.events(task.id)
        finished = {e["job_id"] for e in events if e["status"] == "finish"}
        return events if finished == ran else None

    events = wait_until(settled, 15)
    # A job that passed its check just before the cancel may write its line just after.
    assert all(at < cancelled_at + 0.2 for _, _, at in started), (cancelled_at, started)
    assert len(rig.runs_of("start")) == len(started)
    skipped = [e for e in events if e["job_id"] not in ran]
    assert len(skipped) == 40 - len(ran) >= 30
    assert all(e["status"] == "cancelled" for e in skipped)
    # cancel_task ends the waiting events; a worker that reaches one says it did not run it.
    assert {tuple(texts(e)) for e in skipped} <= {("task cancelled; not run",), ()}
    assert any(texts(e) == ["task cancelled; not run"] for e in skipped)
    # A job running when its task was cancelled sees it through current_job().cancelled.
    assert any("cancelled seen" in texts(e) for e in events if e["job_id"] in ran)


def test_a_revoked_job_ends_cancelled_without_running(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    slow = rig.submittable("celery_jobs.slow")
    rig.start_worker(concurrency=1)
    # A revoke reaches only the workers up when it is broadcast.
    wait_until(lambda: rig.app.control.ping(timeout=0.5), 30)
    task = rig.create(slow, range(5))
    revoked = rig.events(task.id)[-1]["job_id"]
    rig.app.control.revoke(revoked)

    def settled() -> dict[str, dict[str, Any]] | None:
        events = {e["job_id"]: e for e in rig.events(task.id)}
        return events if all(e["status"] in ("finish", "cancelled") for e in events.values()) else None

    events = wait_until(settled, 30)
    assert (events[revoked]["status"], texts(events[revoked])) == ("cancelled", ["revoked"])
    assert sum(e["status"] == "finish" for e in events.values()) == 4
    assert revoked not in {jid for jid, _, _ in rig.runs_of("start")}
    assert rig.wait_settled(task.id)["status"] == "finished"


def the_one_errored_event(rig: CeleryRig, name: str) -> dict[str, Any]:
    """Run one job of ``name`` on a single thread; its task must end with that job in error."""
    limited = rig.submittable(name)
    rig.start_worker(concurrency=1)
    task = rig.create(limited, [0])
    done = rig.wait_settled(task.id, timeout=TIME_LIMIT + 30)
    assert (done["status"], done["counts"]["error"]) == ("finished_with_errors", 1)
    (event,) = rig.events(task.id)
    return event


def test_a_job_past_its_hard_time_limit_ends_error(redis_rig: CeleryRig) -> None:
    event = the_one_errored_event(redis_rig, "celery_jobs.limited")
    assert event["status"] == "error"
    assert texts(event) == ["started", f"time limit exceeded ({TIME_LIMIT:g} s); its process was killed"]


def test_a_job_past_its_soft_time_limit_ends_error_with_the_exception(redis_rig: CeleryRig) -> None:
    event = the_one_errored_event(redis_rig, "celery_jobs.softly_limited")
    assert event["status"] == "error" and event["error_class"].endswith(".SoftTimeLimitExceeded")
    assert texts(event)[0] == "started" and texts(event)[-1] == "no retries left"


def test_a_running_job_revoked_with_terminate_ends_cancelled(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    sleepy = rig.submittable("celery_jobs.sleepy")
    # The run's start is still in its pool process when the revoke kills it, and goes out as the
    # process exits, while the worker records the cancel.
    rig.start_worker(concurrency=1, CELERY_TEST_SEND_INTERVAL="60")
    wait_until(lambda: rig.app.control.ping(timeout=0.5), 30)
    task = rig.create(sleepy, [0])
    (started,) = wait_until(lambda: rig.runs_of("start"), 30)
    rig.app.control.revoke(started[0], terminate=True)

    # The job was cancelled, not its task: the task ends as one whose jobs all ended.
    done = rig.wait_settled(task.id)
    assert (done["status"], done["counts"]["cancelled"]) == ("finished", 1)
    (event,) = rig.events(task.id)
    assert event["status"] == "cancelled"
    assert texts(event) == ["started", f"revoked; terminated by signal {int(signal.SIGTERM)}"]


def test_a_job_that_expired_before_a_worker_took_it_ends_error(rig: CeleryRig) -> None:
    expiring = rig.submittable("celery_jobs.expiring")
    task = rig.create(expiring, [0, 1])
    time.sleep(EXPIRES + 0.5)
    rig.start_worker(concurrency=1)

    done = rig.wait_settled(task.id)
    assert (done["status"], done["counts"]["error"]) == ("finished_with_errors", 2)
    assert all(texts(event) == ["expired before it started"] for event in rig.events(task.id))
    assert rig.runs_of("start") == []


def test_a_job_whose_pool_process_died_is_retried_by_retry_on_worker_lost(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    fragile = rig.submittable("celery_jobs.fragile")
    # Celery's Redis transport would deliver a retry again once it waited unacknowledged past
    # the visibility timeout (a few seconds in these tests), and run it twice.
    rig.start_worker(concurrency=1, CELERY_TEST_VISIBILITY_TIMEOUT="3600")
    # Item n: the job's first n runs die with their pool process. Two retries are allowed.
    task = rig.create(fragile, [0, 2, 3])

    done = rig.wait_settled(task.id, timeout=60)
    assert (done["counts"]["finish"], done["counts"]["error"]) == (2, 1)
    events = by_item(rig.events(task.id))
    assert (events[0]["status"], texts(events[0])) == ("finish", ["started", "finished"])
    lost = "WorkerLostError: Worker exited prematurely: signal 9 (SIGKILL)"
    twice = texts(events[2])
    assert events[2]["status"] == "finish" and events[2]["attempt"] == 3
    assert [t.split(" Job:")[0] for t in twice] == [
        *("started", lost, "waiting for retry 1 of 2"),
        *("started", lost, "waiting for retry 2 of 2"),
        *("started", "finished"),
    ]
    always = texts(events[3])
    assert events[3]["status"] == "error" and events[3]["error_class"].endswith("WorkerLostError")
    assert [t.split(" Job:")[0] for t in always][-3:] == ["started", lost, "no retries left"]
    assert len(rig.runs_of("start")) == 1 + 3 + 3


@pytest.mark.alone
@pytest.mark.slow
def test_a_worker_killed_mid_task_loses_no_transition(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    steady = rig.submittable("celery_jobs.steady")
    # The stream is applied by a flusher of its own: one inside the killed worker would leave
    # what it held to be claimed by another a minute later (late, not lost).
    rig.start_flusher()
    first = rig.start_worker(concurrency=2, ASYNCTASK_FLUSHER="off")
    task = rig.create(steady, range(40))

    def cut_short() -> set[str]:
        started = {jid for jid, _, _ in rig.runs_of("start")}
        done = {jid for jid, _, _ in rig.runs_of("done")}
        return started - done if len(done) >= 10 else set()

    wait_until(cut_short, 30, interval=0.005)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(10)
    cut = {jid for jid, _, _ in rig.runs_of("start")} - {jid for jid, _, _ in rig.runs_of("done")}

    rig.start_worker(concurrency=2, ASYNCTASK_FLUSHER="off")
    done = rig.wait_settled(task.id)
    assert done["status"] == "finished"
    assert done["counts"]["finish"] == 40
    events = {e["job_id"]: e for e in rig.events(task.id)}
    assert all(e["status"] == "finish" and e["progress"] == {"done": 1, "total": 1} for e in events.values())
    # The jobs the kill cut short ran again in the new worker, and were counted once.
    assert cut
    pids = {jid: {pid for j, pid, _ in rig.runs_of("done") if j == jid} for jid in cut}
    assert all(len(found) == 1 for found in pids.values()), pids
    assert all(events[jid]["attempt"] == 2 for jid in cut)


def test_a_celery_task_is_called_back_once_as_its_task_ends(redis_rig: CeleryRig) -> None:
    job = redis_rig.submittable("celery_jobs.handle")
    redis_rig.submittable("celery_jobs.called_back")
    callbacks = {"on_complete": "celery_jobs.called_back", "on_success": "celery_jobs.called_back"}
    failing = redis_rig.create(job, [0, 3], chunk_size=1, **callbacks)
    succeeding = redis_rig.create(job, [0, 1], chunk_size=1, **callbacks)
    cancelled = redis_rig.create(job, [0], **callbacks)
    # Sent by the process that cancels it, before any worker runs.
    redis_rig.tracking.cancel_task(cancelled.id)
    with redis_rig.engine.connect() as connection:
        states = connection.execute(
            text("SELECT kind, state FROM asynctask_task_callback WHERE task_id = :id ORDER BY kind"),
            {"id": cancelled.id},
        ).all()
        assert [tuple(row) for row in states] == [("complete", "pushed"), ("success", "waiting")]
    redis_rig.start_worker(ASYNCTASK_HEARTBEAT_INTERVAL="0.2")
    for task in (failing, succeeding):
        redis_rig.wait_settled(task.id)

    def calls() -> list[tuple[str, str]]:
        return sorted(
            (kind, jid)
            for kind in ("called-finished", "called-finished_with_errors", "called-cancelled")
            for jid, _, _ in redis_rig.runs_of(kind)
        )

    expected = sorted(
        [("called-finished_with_errors", failing.id), ("called-cancelled", cancelled.id)]
        + [("called-finished", succeeding.id)] * 2
    )
    wait_until(lambda: calls() == expected, 20)
    time.sleep(1)
    assert calls() == expected


def test_a_task_waiting_for_a_celery_task_is_released_when_it_ends(rig: CeleryRig) -> None:
    @asynctask.job(registry=rig.registry)
    def publish_rows(chunk: list[int]) -> None: ...

    parent = rig.create(rig.submittable("celery_jobs.handle"), [0, 1], chunk_size=1)
    child = rig.create(publish_rows, [0], after=[parent.id])
    doomed = rig.create(publish_rows, [0], after=[rig.create(rig.submittable("celery_jobs.handle"), [3]).id])
    assert child.hold == doomed.hold == "waiting"
    rig.start_worker(ASYNCTASK_HEARTBEAT_INTERVAL="0.2")
    assert rig.wait_settled(parent.id)["status"] == "finished"
    wait_until(lambda: rig.tracking.get_task(child.id).hold == "released", 20)
    wait_until(lambda: rig.tracking.get_task(doomed.id).hold == "dropped", 20)
    assert rig.tracking.get_task(doomed.id).status == "cancelled"
