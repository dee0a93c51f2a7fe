"""Progress streams hold a server thread each: they are capped per tenant (429) and per process
(503), refused at once with ``Retry-After``, give their slot back however they end, and end by
themselves after ``stream_max_seconds``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.webapi.conftest import Api
from tests.webapi.test_api import error_of, read_events
from webapi.streamslots import stream_cap


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """The caps do not depend on the database: SQLite only."""
    return f"sqlite:///{tmp_path / 'tracking.db'}"


def pending_task(api: Api, token: str | None = None) -> str:
    """A task no worker runs: its stream stays open."""
    task_id: str = api.post_json({"job": "echo", "items": [1]}, token).get_json()["task_id"]
    return task_id


def open_stream(api: Api, task_id: str, token: str | None = None) -> Any:
    return api.http.get(f"/api/tasks/{task_id}/stream", headers=api.headers(token), buffered=False)


def open_slots(api: Api) -> int:
    slots: int = api.app.extensions["asynctask"].streams.open
    return slots


def test_a_tenant_over_its_cap_gets_429_and_others_still_stream(make_api: Any) -> None:
    api: Api = make_api(max_streams=3, max_tenant_streams=2)
    ours, theirs = pending_task(api), pending_task(api, api.globex)
    held = [open_stream(api, ours), open_stream(api, ours)]
    assert [r.status_code for r in held] == [200, 200]

    refused = open_stream(api, ours)
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "5"
    error = error_of(refused)
    assert error["code"] == "too_many_streams"
    assert error["details"] == {"limit": "max_tenant_streams", "max": 2}

    # The process has room for one more stream, of another tenant; then it is full.
    held.append(open_stream(api, theirs, api.globex))
    assert held[-1].status_code == 200
    full = open_stream(api, theirs, api.globex)
    assert full.status_code == 503
    assert full.headers["Retry-After"] == "5"
    error = error_of(full)
    assert (error["code"], error["details"]) == ("streams_unavailable", {"limit": "max_streams", "max": 3})

    # Ordinary requests are not affected.
    assert api.get(f"/api/tasks/{ours}").status_code == 200
    for response in held:
        response.close()
    assert open_slots(api) == 0


def test_a_closed_stream_gives_its_slot_back(make_api: Any) -> None:
    api: Api = make_api(max_streams=1, max_tenant_streams=1)
    task_id = pending_task(api)
    first = open_stream(api, task_id)
    assert open_stream(api, task_id).status_code == 429
    first.close()
    second = open_stream(api, task_id)
    assert second.status_code == 200
    second.close()
    assert open_slots(api) == 0


def test_a_refused_or_finished_stream_holds_no_slot(make_api: Any) -> None:
    api: Api = make_api(max_streams=1, max_tenant_streams=1)
    for _ in range(3):
        assert open_stream(api, "no-such-task").status_code == 404
        assert open_stream(api, pending_task(api, api.globex)).status_code == 404
    done = pending_task(api)
    api.post(f"/api/tasks/{done}/cancel")
    for _ in range(3):
        response = open_stream(api, done)
        assert [kind for kind, _ in read_events(response)] == ["end"]
        response.close()
    assert open_slots(api) == 0


@pytest.mark.timeout(30)
def test_a_stream_ends_after_its_lifetime(make_api: Any) -> None:
    api: Api = make_api(stream_max_seconds=0.5)
    response = open_stream(api, pending_task(api))
    started = time.monotonic()
    events = read_events(response)
    elapsed = time.monotonic() - started
    response.close()
    # The snapshot at once, then nothing changes: the stream closes without an end event.
    assert [kind for kind, _ in events] == ["progress"]
    assert 0.4 < elapsed < 5
    assert open_slots(api) == 0


@pytest.mark.parametrize(
    ("max_streams", "threads", "cap"),
    [(24, 32, 24), (100, 32, 24), (5, 32, 5), (24, 8, 6), (24, 3, 1), (24, 2, 0)],
)
def test_a_quarter_of_the_threads_stay_free_of_streams(max_streams: int, threads: int, cap: int) -> None:
    assert stream_cap(max_streams, threads) == cap
