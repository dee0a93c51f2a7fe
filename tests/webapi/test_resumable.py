"""Stopping and resuming a job over HTTP (``POST /api/jobs/<jid>/stop`` and ``/resume``), on
the Redis broker and on a SQL broker: the job parks with its checkpoint, nothing runs while
it is stopped, and once resumed every iteration has run exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

import asynctask
from asynctask import Registry
from asynctask.middleware import Chain, TrackingServerMiddleware
from asynctask.worker import Worker
from tests.conftest import wait_until
from tests.webapi.conftest import Api, MakeApi

ITEMS = 200


@pytest.fixture
def swept(registry: Registry) -> list[int]:
    """The indexes ``sweep`` ran, in order: 10 ms each, its cursor the last one done."""
    seen: list[int] = []

    @asynctask.job(api=True, registry=registry)
    def sweep(items: list[int], cursor: int | None = None) -> Iterator[int]:
        for index in range(0 if cursor is None else cursor + 1, len(items)):
            time.sleep(0.01)
            seen.append(index)
            yield index

    return seen


@pytest.fixture
def worker_for(registry: Registry) -> Iterator[Any]:
    started: list[tuple[Worker, threading.Thread]] = []

    def start(api: Api) -> None:
        fast = replace(
            api.client.settings, concurrency=2, fetch_timeout=0.2, heartbeat_interval=0.5, process_ttl=3
        )
        worker = Worker(fast, registry=registry, server_middleware=Chain([TrackingServerMiddleware()]))
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
        thread.start()
        started.append((worker, thread))

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(30)


def test_a_job_stopped_and_resumed_over_http_runs_every_iteration_once(
    make: MakeApi, swept: list[int], worker_for: Any
) -> None:
    api = make(max_items=ITEMS, max_chunk_size=ITEMS)
    created = api.post_json({"job": "sweep", "items": list(range(ITEMS)), "chunk_size": ITEMS})
    assert created.status_code == 202, created.get_json()
    task_id = created.get_json()["task_id"]
    jid = api.get(f"/api/tasks/{task_id}/events").get_json()["items"][0]["job_id"]
    worker_for(api)
    wait_until(lambda: len(swept) >= 50, timeout=20)

    assert api.post(f"/api/jobs/{jid}/stop", token=api.globex).status_code == 404, "another tenant's job"
    stopping = api.post(f"/api/jobs/{jid}/stop")
    assert (stopping.status_code, stopping.get_json()) == (202, {"jid": jid, "state": "stopping"})
    listed = wait_until(lambda: api.get(f"/api/tasks/{task_id}/events?status=stopped").get_json()["items"])
    stop_point = len(swept)
    assert listed[0]["job_id"] == jid and listed[0]["messages"][-1]["text"] == f"stopped at {swept[-1]}"
    time.sleep(2)
    assert len(swept) == stop_point, "the job ran on after it stopped"

    again = api.post(f"/api/jobs/{jid}/stop")
    assert (again.status_code, again.get_json()) == (200, {"jid": jid, "state": "stopped"})
    resumed = api.post(f"/api/jobs/{jid}/resume")
    assert (resumed.status_code, resumed.get_json()) == (
        200,
        {"jid": jid, "state": "enqueued", "queue": "default"},
    )
    assert api.wait_settled(task_id)["status"] == "finished"
    assert swept == list(range(ITEMS)), "an iteration was skipped or ran twice"

    refused = api.post(f"/api/jobs/{jid}/resume")
    assert (refused.status_code, refused.get_json()["error"]["code"]) == (409, "job_not_stopped")
    ended = api.post(f"/api/jobs/{jid}/stop")
    assert (ended.status_code, ended.get_json()["error"]["code"]) == (409, "job_ended")
    unknown = api.post("/api/jobs/0123456789abcdef01234567/stop")
    assert (unknown.status_code, unknown.get_json()["error"]["code"]) == (404, "job_not_found")


def test_resuming_a_running_job_is_refused(make: MakeApi, swept: list[int], worker_for: Any) -> None:
    api = make(max_items=ITEMS, max_chunk_size=ITEMS)
    task_id = api.post_json({"job": "sweep", "items": list(range(ITEMS)), "chunk_size": ITEMS}).get_json()[
        "task_id"
    ]
    jid = api.get(f"/api/tasks/{task_id}/events").get_json()["items"][0]["job_id"]
    worker_for(api)
    wait_until(lambda: len(swept) >= 5, timeout=20)
    refused = api.post(f"/api/jobs/{jid}/resume")
    assert (refused.status_code, refused.get_json()["error"]["code"]) == (409, "job_not_stopped")
    assert api.post(f"/api/tasks/{task_id}/cancel").status_code == 200
    # A cancelled task's running resumable job stops at its next checkpoint, not at its end.
    assert api.wait_settled(task_id, timeout=10)["status"] == "cancelled"
    wait_until(lambda: api.get(f"/api/tasks/{task_id}/events?status=cancelled").get_json()["items"])
    assert len(swept) < ITEMS
