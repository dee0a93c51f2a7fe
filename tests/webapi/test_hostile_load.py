"""The API as ``asynctask api`` runs it (gunicorn, 2 workers x 32 threads, a real subprocess on a
free port) under hostile load: the bounds asserted here are the behaviour under test.

- 300 progress streams opened at once by one tenant: each is either served or refused at once
  (429/503 with ``Retry-After``), and ``/healthz`` and ``GET /api/tasks/<id>`` keep answering
  with a 99th percentile under 100 ms while the served streams stay open.
- A 63 MiB JSON body of ``{"job": ..., "items": [{},{},...]}``: refused with 413 in under 2 s,
  and the worker's peak memory grows by less than 100 MB (its kernel high-water mark, reset
  just before the request).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import redis

from tests.conftest import wait_until
from tests.processes import free_port
from tests.webapi.test_server import CLI, Server, migrated_with_token, redis_api_env

# Times what it checks: runs alone (see the marker in pyproject.toml).
pytestmark = pytest.mark.alone

ROOT = Path(__file__).resolve().parents[2]
STREAMS = 300
#: The server's defaults (asynctask api; ApiConfig): 2 workers, each with at most 8 streams of a tenant.
WORKERS = 2
MAX_TENANT_STREAMS = 8
#: Requests each of /healthz and GET /api/tasks/<id> sends while the streams are open.
SAMPLES = 150
P99_LIMIT = 0.100
BODY_BYTES = 63 * 1024 * 1024
MEMORY_LIMIT = 100 * 1024 * 1024
TIME_LIMIT = 2.0


@dataclass
class Deployed:
    server: Server
    process: subprocess.Popen[bytes]

    def workers(self) -> list[psutil.Process]:
        return psutil.Process(self.process.pid).children()


@pytest.fixture
def deployed(tmp_path: Path, namespace: str, conn: redis.Redis) -> Iterator[Deployed]:
    env = redis_api_env(namespace, tmp_path)
    token = migrated_with_token(env)
    port = free_port()
    # The defaults of `asynctask api`: 2 workers x 32 threads.
    process = subprocess.Popen([*CLI, "api", "--port", str(port)], env=env, cwd=ROOT, start_new_session=True)
    deployed = Deployed(Server(port, token), process)
    try:
        wait_until(lambda: _answers(deployed), 30, interval=0.1)
        yield deployed
    finally:
        # The server and its workers at once: a stream blocked in its wait would hold even a
        # quick shutdown until gunicorn's graceful timeout.
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


def _answers(deployed: Deployed) -> bool:
    try:
        return len(deployed.workers()) == WORKERS and deployed.server.request("GET", "/healthz")[0] == 200
    except OSError:
        return False


def test_open_streams_never_starve_other_requests(deployed: Deployed) -> None:
    server = deployed.server
    status, _, created = server.request(
        "POST",
        "/api/tasks",
        json.dumps({"job": "import_products", "items": [{"sku": "A", "name": "a", "price": "1"}]}).encode(),
        "application/json",
    )
    assert status == 202, created
    # No worker runs: the task stays pending and every served stream stays open.
    task_path = f"/api/tasks/{created['task_id']}"

    latencies: dict[str, list[float]] = {"/healthz": [], task_path: []}
    streams_answered = threading.Event()
    failures: list[str] = []

    def sample() -> None:
        after_streams = 0
        while after_streams < SAMPLES:
            for path, seen in latencies.items():
                started = time.perf_counter()
                try:
                    code, _, _ = server.request("GET", path, timeout=5)
                except OSError as exc:
                    failures.append(f"{path}: {exc!r}")
                    return
                seen.append(time.perf_counter() - started)
                if code != 200:
                    failures.append(f"{path}: {code}")
            if streams_answered.is_set():
                after_streams += 1

    sampler = threading.Thread(target=sample)
    sampler.start()
    sockets = [_open_stream(server, task_path) for _ in range(STREAMS)]
    try:
        statuses = _first_lines(sockets, deadline=time.monotonic() + 15)
        streams_answered.set()
        sampler.join(60)
        assert not sampler.is_alive()
    finally:
        streams_answered.set()
        for sock in sockets:
            sock.close()

    assert not failures, failures[:5]
    served = [s for s in statuses if s.startswith(b"HTTP/1.1 200")]
    refused = [s for s in statuses if s.startswith((b"HTTP/1.1 429", b"HTTP/1.1 503"))]
    assert len(served) + len(refused) == STREAMS, {s[:12] for s in statuses}
    assert 0 < len(served) <= WORKERS * MAX_TENANT_STREAMS
    assert all(b"retry-after: 5" in s.lower() for s in refused)
    for path, seen in latencies.items():
        p99 = sorted(seen)[int(len(seen) * 0.99)]
        assert p99 < P99_LIMIT, (path, f"p99 {p99 * 1000:.0f} ms over {len(seen)} requests")


def _open_stream(server: Server, path: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.sendall(
        f"GET {path}/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {server.token}\r\n\r\n".encode()
    )
    return sock


def _first_lines(sockets: list[socket.socket], deadline: float) -> list[bytes]:
    """Each socket's response head (status line and headers), read as they come."""
    heads = {sock: b"" for sock in sockets}
    waiting = set(sockets)
    while waiting and time.monotonic() < deadline:
        readable, _, _ = select.select(list(waiting), [], [], max(0.0, deadline - time.monotonic()))
        for sock in readable:
            chunk = sock.recv(65536)
            heads[sock] += chunk
            if b"\r\n\r\n" in heads[sock] or not chunk:
                waiting.discard(sock)
    assert not waiting, f"{len(waiting)} of {len(sockets)} streams got no answer in time"
    return [heads[sock].partition(b"\r\n\r\n")[0] for sock in sockets]


def test_a_huge_body_is_refused_in_bounded_memory_and_time(deployed: Deployed) -> None:
    server = deployed.server
    head = b'{"job": "import_products", "items": ['
    count = (BODY_BYTES - len(head) - 4) // 3
    body = head + b"{}," * count + b"{}]}"
    workers = deployed.workers()
    # Both workers have loaded the app and served a body of each kind (the imports are done).
    for _ in range(4 * WORKERS):
        server.request("POST", "/api/tasks", b'{"job": "import_products", "items": [1]}', "application/json")
    before = {worker.pid: worker.memory_info().rss for worker in workers}
    for worker in workers:
        _reset_peak(worker.pid)

    started = time.perf_counter()
    status, _, answer = server.request("POST", "/api/tasks", body, "application/json", timeout=10)
    elapsed = time.perf_counter() - started

    assert (status, answer["error"]["code"]) == (413, "too_many_items")
    assert elapsed < TIME_LIMIT, f"{elapsed:.2f} s"
    growth = max(_peak(worker.pid) - before[worker.pid] for worker in workers)
    assert growth < MEMORY_LIMIT, f"a worker grew by {growth / 2**20:.0f} MiB"


def _reset_peak(pid: int) -> None:
    # "5" resets the process's peak resident set size (VmHWM) to its current one.
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")
