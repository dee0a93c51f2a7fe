"""The API as deployed: ``asynctask api`` (gunicorn) and ``asynctask worker`` as real processes,
spoken to over HTTP, with a token made by ``asynctask tokens create``."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.conftest import REDIS_URL, wait_until
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


#: The command line, as the tests' server and worker subprocesses run it.
CLI = [sys.executable, "-m", "asynctask"]


def migrated_with_token(env: dict[str, str]) -> str:
    """Create the tables of ``env``'s database and a token of tenant "acme"; return the token."""
    subprocess.run([*CLI, "db", "upgrade"], env=env, check=True, capture_output=True, cwd=ROOT)
    made = subprocess.run(
        [*CLI, "tokens", "create", "--tenant", "acme"], env=env, check=True, capture_output=True, text=True
    )
    return made.stdout.splitlines()[0]


def redis_api_env(namespace: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of an API server over the shared Redis in ``namespace``, its SQLite
    database in ``tmp_path``, knowing the jobs of tests/jobs/api_jobs.py."""
    return {
        **os.environ,
        "ASYNCTASK_REDIS_URL": REDIS_URL,
        "ASYNCTASK_NAMESPACE": namespace,
        "ASYNCTASK_DATABASE_URL": f"sqlite:///{tmp_path / 'api.db'}",
        "ASYNCTASK_REQUIRE": "tests.jobs.api_jobs",
        "PYTHONPATH": str(ROOT),
        **extra,
    }


class Server:
    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str | None = None,
        *,
        timeout: float = 30,
        **headers: str,
    ) -> tuple[int, dict[str, str], Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        sent = {"Authorization": f"Bearer {self.token}", **headers}
        if content_type:
            sent["Content-Type"] = content_type
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read()
        connection.close()
        parsed = (
            json.loads(data)
            if response.getheader("Content-Type", "").startswith("application/json")
            else data
        )
        return response.status, dict(response.getheaders()), parsed


@pytest.fixture
def deployed(tmp_path: Path, namespace: str, conn: redis.Redis) -> Iterator[Server]:
    env = redis_api_env(namespace, tmp_path, ASYNCTASK_API_MAX_BODY_BYTES=str(1024 * 1024))
    token = migrated_with_token(env)
    port = free_port()
    processes = [
        subprocess.Popen(
            [*CLI, "api", "--port", str(port), "--workers", "2", "--threads", "8"], env=env, cwd=ROOT
        ),
        subprocess.Popen([*CLI, "worker", "-c", "4", "-t", "5"], env=env, cwd=ROOT),
    ]
    server = Server(port, token)
    try:
        wait_until(lambda: _answers(server), 30, interval=0.1)
        yield server
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        codes = [process.wait(30) for process in processes]
        assert codes == [0, 0]


def _answers(server: Server) -> bool:
    try:
        return server.request("GET", "/healthz")[0] == 200
    except OSError:
        return False


def test_every_endpoint_over_http(deployed: Server) -> None:
    status, _, body = deployed.request("GET", "/readyz")
    assert (status, body["status"]) == (200, "ready")
    status, _, body = deployed.request("GET", "/api/jobs")
    assert [job["name"] for job in body["jobs"]] == ["import_products", "sign_up_products"]
    status, _, body = deployed.request("GET", "/openapi.json")
    assert status == 200 and body["openapi"].startswith("3.1")
    status, headers, page = deployed.request("GET", "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html") and b"<html" in page.lower()

    rows = ["sku,name,price"] + [f"S{i},Item {i},{-1 if i % 10 == 0 else i}" for i in range(1, 101)]
    status, headers, created = deployed.request(
        "POST", "/api/tasks?job=import_products&chunk_size=5", "\n".join(rows).encode(), "text/csv"
    )
    assert status == 202, created
    task_id = created["task_id"]
    assert headers["Location"] == f"/api/tasks/{task_id}" and created["jobs"] == 20

    events = _stream(deployed, f"/api/tasks/{task_id}/stream")
    assert events[-1][0] == "end"
    final = events[-1][1]
    assert final["status"] == "finished_with_errors"
    assert (final["counts"]["finish"], final["counts"]["failed"]) == (10, 10)
    assert final["errors"][0]["error"] == "price must be positive for SKU S10"

    status, _, task = deployed.request("GET", f"/api/tasks/{task_id}")
    assert status == 200 and task["progress"] == 1.0
    status, _, page = deployed.request("GET", f"/api/tasks/{task_id}/events?status=failed&limit=3")
    assert status == 200 and len(page["items"]) == 3 and page["next"]
    status, _, listing = deployed.request("GET", "/api/tasks")
    assert [t["id"] for t in listing["items"]] == [task_id]
    status, _, retried = deployed.request("POST", f"/api/tasks/{task_id}/retry")
    assert (status, retried["retried"]) == (202, 10)
    # Once the retried jobs have failed again the task is settled: nothing is left to cancel.
    kind, settled = _stream(deployed, f"/api/tasks/{task_id}/stream")[-1]
    assert kind == "end" and settled["counts"]["failed"] == 10
    status, _, body = deployed.request("POST", f"/api/tasks/{task_id}/cancel")
    assert (status, body["error"]["code"]) == (409, "task_not_cancellable")

    status, _, body = deployed.request("GET", "/api/tasks", Authorization="Bearer atk_wrong")
    assert (status, body["error"]["code"]) == (401, "unauthorized")
    too_big = b'{"job": "import_products", "items": [' + b'"x",' * 300_000 + b'"x"]}'
    status, _, body = deployed.request("POST", "/api/tasks", too_big, "application/json")
    assert (status, body["error"]["code"]) == (413, "body_too_large")


def _stream(server: Server, path: str) -> list[tuple[str, dict[str, Any]]]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.request("GET", path, headers={"Authorization": f"Bearer {server.token}"})
    response = connection.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type", "").startswith("text/event-stream")
    events: list[tuple[str, dict[str, Any]]] = []
    deadline = time.monotonic() + 60
    kind = ""
    while time.monotonic() < deadline:
        line = response.fp.readline().decode()
        if not line:
            break
        if line.startswith("event: "):
            kind = line[7:].strip()
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    connection.close()
    return events
