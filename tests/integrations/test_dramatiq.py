"""Dramatiq jobs tracked by AsyncTask: tasks submitted through the HTTP API and through
``create_task`` with a Dramatiq actor, run by real ``dramatiq`` worker processes on Redis,
recorded with AsyncTask's rules; cancelled mid-run."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq import Broker, Middleware
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import MiddlewareError
from flask.testing import FlaskClient
from sqlalchemy import Engine

from asynctask import Client, JobFailed, Registry, Tracking
from asynctask.db.engine import create_database_engine
from asynctask.db.migrate import upgrade
from asynctask.errors import JobsNotSent
from asynctask.integrations import dramatiq as tracked
from asynctask.tokens import create_token
from tests.conftest import db_url, fresh_postgres_schema, wait_until
from tests.integrations.dramatiq_jobs import MAX_RETRIES, QUEUE, TIME_LIMIT_MS
from tests.integrations.dramatiq_support import (
    ITEMS,
    Runtime,
    dramatiq_runtime,
    expected_log,
    item,
    outcome_of,
    rabbitmq_runtime,
)
from webapi import create_app
from webapi.resources import EXTENSION

RABBITMQ_URL = os.environ.get("ASYNCTASK_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


@pytest.fixture
def database(tmp_path: Path) -> Iterator[str]:
    with fresh_postgres_schema() as url:
        upgrade(url)
        yield url


@pytest.fixture
def runtime(claimed_db: int, database: str, tmp_path: Path) -> Iterator[Runtime]:
    with dramatiq_runtime(db_url(claimed_db), database, tmp_path) as made:
        yield made


@pytest.fixture
def engine(database: str) -> Iterator[Engine]:
    created = create_database_engine(database)
    yield created
    created.dispose()


@pytest.fixture
def tracking(runtime: Runtime, registry: Registry, engine: Engine) -> Iterator[Tracking]:
    client = Client(runtime.settings, registry=registry)
    yield Tracking(client, engine)
    client.close()


def settled(tracking: Tracking, task_id: str, timeout: float = 45.0) -> Any:
    def done() -> Any:
        view = tracking.get_task(task_id)
        return view if view.status in ("finished", "finished_with_errors", "cancelled") else None

    return wait_until(done, timeout, interval=0.1)


def texts(event: dict[str, Any]) -> list[str]:
    return [message["text"] for message in event["messages"]]


def test_a_hundred_items_posted_to_the_api_end_as_their_actor_decided(
    runtime: Runtime, tracking: Tracking, registry: Registry, engine: Engine
) -> None:
    tracked.submittable(runtime.actors.import_items, name="import_items", registry=registry)
    app = create_app(
        {"settings": runtime.settings, "token_cache_seconds": 0.0, "stream_interval": 0.05},
        client=tracking.client,
        engine=engine,
    )
    app.testing = True
    http: FlaskClient = app.test_client()
    headers = {"Authorization": f"Bearer {create_token(engine, 'acme').token}"}
    try:
        runtime.spawn()
        lines = "".join(f'{{"n": {i["n"]}, "outcome": "{i["outcome"]}", "sleep": 0}}\n' for i in ITEMS)
        response = http.post(
            "/api/tasks?job=import_items&chunk_size=1",
            data=lines,
            content_type="application/x-ndjson",
            headers=headers,
        )
        assert response.status_code == 202, response.get_json()
        task_id = response.get_json()["task_id"]

        def final() -> dict[str, Any] | None:
            body: dict[str, Any] = http.get(f"/api/tasks/{task_id}", headers=headers).get_json()
            return body if body["status"] in ("finished", "finished_with_errors") else None

        task = wait_until(final, 45, interval=0.1)
        assert task["status"] == "finished_with_errors", runtime.worker_logs()
        counts = {status: count for status, count in task["counts"].items() if count}
        assert counts == {"finish": 75, "failed": 15, "error": 10}
        assert task["job"] == "import_items" and task["queue"] == QUEUE

        events = http.get(f"/api/tasks/{task_id}/events?limit=100", headers=headers).get_json()["items"]
        assert len(events) == 100
        by_n = {event["params"][0][0]["n"]: event for event in events}
        for n, event in sorted(by_n.items()):
            outcome = outcome_of(n)
            status = {"ok": "finish", "fail": "failed", "crash": "error"}[outcome]
            attempts = MAX_RETRIES + 1 if outcome == "crash" else 1
            assert (event["status"], event["attempt"]) == (status, attempts), (n, event)
            assert texts(event) == expected_log(n, outcome), (n, event)
            error = {"ok": None, "fail": f"item {n} refused", "crash": f"RuntimeError: item {n} broke"}
            assert event["error"] == error[outcome], (n, event)
            assert event["progress"] == {"done": 1, "total": 1}, (n, event)
        # Every job ran exactly as often as its event says: no run more, no run unrecorded.
        starts = [jid for jid, _, _ in runtime.starts()]
        assert sorted(starts) == sorted(e["job_id"] for e in events for _ in range(e["attempt"]))

        # The task's first errors, as the page shows them, are its failed and error jobs.
        errors = task["errors"]
        assert errors and {e["status"] for e in errors} <= {"failed", "error"}
        for error in errors:
            assert error["error"] == by_n[error["params"][0][0]["n"]]["error"]
        failed = http.get(f"/api/tasks/{task_id}/events?status=failed&limit=100", headers=headers).get_json()
        assert sorted(e["error"] for e in failed["items"]) == sorted(
            f"item {n} refused" for n in range(100) if outcome_of(n) == "fail"
        )
    finally:
        app.extensions[EXTENSION].watcher.close()


def test_on_rabbitmq_and_without_redis_the_workers_write_the_tracking_database(
    database: str, registry: Registry, engine: Engine, tmp_path: Path
) -> None:
    with rabbitmq_runtime(RABBITMQ_URL, database, tmp_path) as runtime:
        client = Client(runtime.settings, registry=registry)
        try:
            tracking = Tracking(client, engine)
            task_id = tracking.create_task(runtime.actors.import_items, ITEMS).id
            runtime.spawn()
            view = settled(tracking, task_id)
            assert {k: v for k, v in view.counts.items() if v} == {"finish": 75, "failed": 15, "error": 10}
            for event in tracking.list_events(task_id, limit=100).items:
                assert event.params is not None
                n = event.params[0][0]["n"]
                assert [m.text for m in event.messages] == expected_log(n, outcome_of(n)), (n, event)
        finally:
            client.close()


def test_create_task_with_an_actor_sends_its_chunks_as_messages_of_that_actor(
    runtime: Runtime, tracking: Tracking
) -> None:
    sent: list[Any] = []

    class Seen(Middleware):
        def after_enqueue(self, broker: Broker, message: Any, delay: int | None) -> None:
            sent.append(message)

    runtime.broker.add_middleware(Seen())
    task_id = tracking.create_task(runtime.actors.import_items, ITEMS[:5], chunk_size=2).id
    events = tracking.list_events(task_id).items
    assert [m.message_id for m in sent] == [e.job_id for e in events]
    assert [m.options[tracked.TASK_OPTION] for m in sent] == [task_id] * 3
    assert [list(m.args) for m in sent] == [[ITEMS[0:2]], [ITEMS[2:4]], [ITEMS[4:5]]]
    assert {m.actor_name for m in sent} == {"import_items"} and {m.queue_name for m in sent} == {QUEUE}
    # The actor is registered under its name, so retry_task finds its sender.
    assert tracking.get_task(task_id).job_name == "import_items"


def test_a_broker_failing_half_way_ends_the_unsent_jobs_and_says_so(
    runtime: Runtime, tracking: Tracking
) -> None:
    class Full(MiddlewareError):
        pass

    class Refuse(Middleware):
        """Accepts three messages, then refuses the rest (a MiddlewareError stops an enqueue)."""

        def __init__(self) -> None:
            self.accepted = 0

        def before_enqueue(self, broker: Broker, message: Any, delay: int | None) -> None:
            if self.accepted == 3:
                raise Full("queue full")
            self.accepted += 1

    runtime.broker.add_middleware(Refuse())
    with pytest.raises(JobsNotSent) as raised:
        tracking.create_task(runtime.actors.import_items, ITEMS[:5], chunk_size=1)
    task_id = raised.value.task_id
    events = tracking.list_events(task_id).items
    assert [e.status for e in events] == ["enqueue"] * 3 + ["error"] * 2
    assert {e.error for e in events[3:]} == {"not sent: queue full"}
    assert runtime.queued() == 3


def test_job_failed_is_listed_in_throws_of_actors_declared_before_and_after() -> None:
    def refuse(items: list[Any]) -> None:
        raise JobFailed("no")

    broker = StubBroker()
    before = dramatiq.actor(actor_name="before", broker=broker, max_retries=5)(refuse)
    broker.add_middleware(tracked.Tracking())
    after = dramatiq.actor(actor_name="after", broker=broker, throws=(KeyError,))(refuse)
    assert before.options["throws"] is JobFailed
    assert after.options["throws"] == (KeyError, JobFailed)


def test_cancel_mid_run_starts_no_job_afterwards_and_the_task_ends_cancelled(
    runtime: Runtime, tracking: Tracking
) -> None:
    # The first job runs until it sees the cancel; the others take their time.
    items = [item(0, "watch", sleep=20), *(item(n, "ok", sleep=0.2) for n in range(1, 60))]
    task_id = tracking.create_task(runtime.actors.import_items, items, chunk_size=1).id
    runtime.spawn(threads=4)
    wait_until(lambda: len(runtime.starts()) >= 8, 30)
    tracking.cancel_task(task_id)
    cancelled_at = time.time()

    # Every message leaves the queue: the worker skips those of the cancelled task.
    wait_until(lambda: runtime.queued() == 0, 30)
    starts = runtime.starts()
    late = [at for _, _, at in starts if at > cancelled_at]
    assert late == [], f"{len(late)} job(s) started after the cancel"

    def counted() -> Any:
        view = tracking.get_task(task_id)
        counts = {status: count for status, count in view.counts.items() if count}
        return view if counts == {"finish": len(starts), "cancelled": 60 - len(starts)} else None

    assert wait_until(counted, 20).status == "cancelled"

    # The worker itself skipped them: each says so once (cancelling in SQL writes no message,
    # and the counts are right before the flusher has applied the worker's skips).
    def skips() -> set[tuple[str, ...]]:
        skipped = tracking.list_events(task_id, status="cancelled", limit=100).items
        return {tuple(m.text for m in e.messages) for e in skipped}

    wait_until(lambda: () not in skips(), 10)
    assert skips() == {("task cancelled; not run",)}
    # The running job saw ``current_job().cancelled`` turn True and stopped early.
    watcher = next(e for e in tracking.list_events(task_id, limit=100).items if e.params == [[items[0]]])
    assert [m.text for m in watcher.messages] == ["started", "item 0", "saw the cancel", "finished"]
    assert watcher.finished_at is not None and watcher.started_at is not None
    assert (watcher.finished_at - watcher.started_at).total_seconds() < 10


def test_retry_task_sends_the_failed_jobs_again_as_messages_of_their_actor(
    runtime: Runtime, tracking: Tracking, registry: Registry
) -> None:
    tracked.submittable(runtime.actors.import_items, registry=registry)
    items = [item(0, "ok"), item(1, "fail")]
    task_id = tracking.create_task(runtime.actors.import_items, items).id
    runtime.spawn(threads=2)
    assert settled(tracking, task_id).status == "finished_with_errors"
    assert tracking.retry_task(task_id) == 1

    expected = [
        *("started", "item 1", "item 1 refused", "retried by request"),
        *("started", "item 1", "item 1 refused"),
    ]

    def rerun() -> Any:
        events = tracking.list_events(task_id, status="failed").items
        return events and [m.text for m in events[0].messages] == expected and events[0]

    failed = wait_until(rerun, 30)
    assert failed.attempt == 2
    view = tracking.get_task(task_id)
    assert view.status == "finished_with_errors" and (view.counts["finish"], view.counts["failed"]) == (1, 1)
    # The same job ran again: one jid, two starts.
    assert [jid for jid, _, _ in runtime.starts()].count(failed.job_id) == 2


def test_a_flusher_forked_by_dramatiq_applies_what_the_worker_processes_record(
    runtime: Runtime, tracking: Tracking
) -> None:
    task_id = tracking.create_task(runtime.actors.import_items, ITEMS[:40]).id
    # The workers apply nothing themselves (ASYNCTASK_FLUSHER=off): only the fork does.
    runtime.spawn(
        processes=2,
        threads=4,
        options=["--fork", "asynctask.integrations.dramatiq:flusher_process"],
        ASYNCTASK_FLUSHER="off",
    )
    view = settled(tracking, task_id, timeout=30)
    expected = Counter({"ok": "finish", "fail": "failed", "crash": "error"}[outcome_of(n)] for n in range(40))
    assert {k: v for k, v in view.counts.items() if v} == dict(expected)


def test_a_message_another_middleware_drops_before_it_starts_ends_in_error(
    runtime: Runtime, tracking: Tracking
) -> None:
    task_id = tracking.create_task(runtime.actors.aged, ITEMS[:3]).id
    # Older than its actor's max_age by the time a worker fetches it: AgeLimit skips it.
    time.sleep(0.05)
    runtime.spawn(threads=1)
    view = wait_until(lambda: (v := tracking.get_task(task_id)).counts["error"] == 3 and v, 30)
    assert view.status == "finished_with_errors" and runtime.starts() == []
    for event in tracking.list_events(task_id).items:
        assert [m.text for m in event.messages] == ["not run: Message age limit exceeded"]
        assert (event.status, event.attempt) == ("error", 0)


def test_a_time_limit_ends_the_run_in_error_and_says_which_limit(
    runtime: Runtime, tracking: Tracking
) -> None:
    task_id = tracking.create_task(runtime.actors.limited, [item(1, "ok", sleep=5)]).id
    runtime.spawn(threads=1)
    view = wait_until(lambda: (v := tracking.get_task(task_id)).counts["error"] == 1 and v, 30)
    (event,) = tracking.list_events(task_id).items
    limit = f"TimeLimitExceeded: time limit of {TIME_LIMIT_MS / 1000:g} s exceeded"
    assert [m.text for m in event.messages] == [
        *("started", "item 1", limit, "waiting for retry 1 of 1"),
        *("started", "item 1", limit, "no retries left"),
    ]
    assert (event.status, event.attempt, event.error, view.status) == (
        "error",
        2,
        limit,
        "finished_with_errors",
    )
