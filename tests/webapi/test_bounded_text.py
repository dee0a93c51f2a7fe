"""A job that logs 10 MB and raises with a 10 MB message, retried twice, through a real API
server and worker: its event and messages hold at most the tracked text limit plus the marker,
a read of its task stays under 256 KB, and the API server's memory stays small."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import redis
from sqlalchemy import func, select

from asynctask.db.engine import create_database_engine
from asynctask.storable import DEFAULT_TEXT_LIMIT
from asynctask.tracking.models import Event, EventMessage
from tests.conftest import REDIS_URL, wait_until
from tests.processes import free_port
from tests.webapi.test_server import CLI, ROOT, Server, _answers, migrated_with_token

MARKER = "... (truncated, 10485774 bytes)"  # "RuntimeError: " and the 10 MB message
MIB = 1024 * 1024


@pytest.fixture
def loud(tmp_path: Path, namespace: str, conn: redis.Redis) -> Iterator[tuple[Server, psutil.Process, str]]:
    database = f"sqlite:///{tmp_path / 'api.db'}"
    env = {
        **os.environ,
        "ASYNCTASK_REDIS_URL": REDIS_URL,
        "ASYNCTASK_NAMESPACE": namespace,
        "ASYNCTASK_DATABASE_URL": database,
        "ASYNCTASK_REQUIRE": "tests.jobs.loud_jobs",
        "ASYNCTASK_SCHEDULED_POLL_INTERVAL": "0.2",
        "PYTHONPATH": str(ROOT),
    }
    token = migrated_with_token(env)
    port = free_port()
    api = subprocess.Popen(
        [*CLI, "api", "--port", str(port), "--workers", "1", "--threads", "4"], env=env, cwd=ROOT
    )
    log = tmp_path / "worker.log"
    with log.open("wb") as stderr:
        worker = subprocess.Popen([*CLI, "worker", "-c", "2", "-t", "5"], env=env, cwd=ROOT, stderr=stderr)
    server = Server(port, token)
    try:
        wait_until(lambda: _answers(server), 30, interval=0.1)
        yield server, psutil.Process(api.pid), database
    finally:
        for process in (api, worker):
            process.send_signal(signal.SIGTERM)
        worker.wait(30)
        api.wait(30)
        # The worker's log lines are bounded too: three failures of 10 MB each would be 30 MB.
        assert log.stat().st_size < MIB


def test_a_job_that_says_too_much_is_recorded_and_read_within_bounds(
    loud: tuple[Server, psutil.Process, str],
) -> None:
    server, api, database = loud
    status, _, created = server.request(
        "POST", "/api/tasks", b'{"job": "shout", "items": [1]}', "application/json"
    )
    assert status == 202, created
    path = f"/api/tasks/{created['task_id']}"

    def ended() -> bool:
        return bool(server.request("GET", path)[2]["status"] == "finished_with_errors")

    wait_until(ended, 60, interval=0.2)
    engine = create_database_engine(database)
    try:
        with engine.connect() as connection:
            (event,) = connection.execute(select(Event.error, Event.attempt, Event.id)).all()
            texts = list(
                connection.scalars(select(EventMessage.text).where(EventMessage.event_id == event.id))
            )
            assert connection.execute(select(func.count()).select_from(EventMessage)).scalar_one() == len(
                texts
            )
    finally:
        engine.dispose()
    assert event.attempt == 3
    limit = DEFAULT_TEXT_LIMIT + len("... (truncated, 10485760 bytes)")
    assert event.error.startswith("RuntimeError: yyy") and event.error.endswith(MARKER)
    assert len(event.error.encode()) <= limit
    assert sum(text.startswith("x" * 100) for text in texts) == 3
    assert all(len(text.encode()) <= limit for text in texts)

    for _ in range(5):
        assert server.request("GET", path + "/events")[0] == 200
    http_connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    http_connection.request("GET", path, headers={"Authorization": f"Bearer {server.token}"})
    response = http_connection.getresponse()
    body = response.read()
    http_connection.close()
    assert response.status == 200 and len(body) < 256 * 1024, len(body)
    rss = max(p.memory_info().rss for p in [api, *api.children(recursive=True)])
    assert rss < 200 * MIB, rss
