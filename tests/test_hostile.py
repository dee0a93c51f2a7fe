"""Hostile payloads pushed straight into a queue: each is buried with a clear error, the worker lives on."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

import asynctask
from asynctask import Client, Registry
from asynctask.worker import Worker
from tests.conftest import wait_until


def test_hostile_payloads_end_in_the_dead_set_and_the_worker_keeps_going(
    registry: Registry,
    client: Client,
    conn: redis.Redis,
    start_worker: Callable[..., Worker],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "imported"
    monkeypatch.setenv("ASYNCTASK_EVIL_MARKER", str(marker))
    ran: list[int] = []

    @asynctask.job(registry=registry)
    def takes_two(a: int, b: int) -> None:
        ran.append(a + b)

    queue = client.keys.queue("default")
    base = '"retry":true,"queue":"default","jid":"{jid}","created_at":1.0,"enqueued_at":1.0'
    hostile = {
        "invalid JSON": b'{"class":"takes_two","args":[1,',
        "unknown class": (
            '{"class":"tests.jobs.evil_marker","args":[],' + base.format(jid="1" * 24) + "}"
        ).encode(),
        "wrong arg count": ('{"class":"takes_two","args":[1],' + base.format(jid="2" * 24) + "}").encode(),
        "non-list args": ('{"class":"takes_two","args":{"a":1},' + base.format(jid="3" * 24) + "}").encode(),
        "10 MB payload": (
            '{"class":"takes_two","args":["' + "x" * 10_000_000 + '",1],' + base.format(jid="4" * 24) + "}"
        ).encode(),
        "not an object": b"[1,2,3]",
        "invalid UTF-8": b'{"class":"takes_two","args":["\xff"]}',
    }
    conn.lpush(queue, *hostile.values())
    conn.lpush(queue, b'{"class":"takes_two","args":[20,22],' + base.format(jid="5" * 24).encode() + b"}")
    start_worker()
    wait_until(lambda: ran == [42] and conn.zcard(client.keys.dead) == len(hostile), timeout=15)

    dead = [json.loads(raw) for raw in conn.zrange(client.keys.dead, 0, -1)]
    messages = sorted(entry["error_message"] for entry in dead)
    assert all(entry["error_class"] and entry["failed_at"] for entry in dead)
    by_jid = {entry["jid"]: entry for entry in dead}
    assert "is not registered" in by_jid["1" * 24]["error_message"]
    assert by_jid["1" * 24]["error_class"] == "asynctask.JobNotRegistered"
    assert "cannot take 1 argument" in by_jid["2" * 24]["error_message"]
    assert "'args' must be a list, got dict" in by_jid["3" * 24]["error_message"]
    assert sum("over the 1048576-byte limit" in m for m in messages) == 1
    assert sum("not valid JSON" in m for m in messages) == 2
    assert sum("JSON list, not an object" in m for m in messages) == 1
    # The unparseable entries keep the original text so nothing is silently lost.
    assert '{"class":"takes_two","args":[1,' in [
        e["args"][0] for e in dead if e["class"] == "AsyncTask::UnparseableJob"
    ]

    assert not marker.exists()
    assert "tests.jobs.evil_marker" not in sys.modules
    assert conn.llen(queue) == 0
    wait_until(lambda: conn.hlen(client.keys.inflight_registry) == 1)
    assert all(conn.llen(key) == 0 for key in conn.hkeys(client.keys.inflight_registry))
