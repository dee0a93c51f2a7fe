"""A running ``asynctask worker`` as Ruby's ProcessSet, Workers and Stats see it, and remote control."""

from __future__ import annotations

import re
import socket
import time
import uuid
from typing import Any

import pytest
import redis

from tests.conftest import wait_for_beats, wait_until
from tests.interop.conftest import PythonJob, RunRuby, Services
from tests.interop.interop_jobs import PERFORMED_KEY, RELEASE_KEY, SLEEPING_KEY

pytestmark = pytest.mark.interop

IDENTITY = re.compile(r"^(?P<host>.+):(?P<pid>\d+):[0-9a-f]{12}$")


def hget(db: redis.Redis, key: str, field: str) -> str | None:
    value = db.hget(key, field)
    return None if value is None else value.decode()


def test_ruby_api_sees_asynctask_process_busy_jobs_and_stats(
    ruby: RunRuby, services: Services, python_job: PythonJob, db: redis.Redis
) -> None:
    worker, identity = services.python_worker(heartbeat=1.0)
    token = uuid.uuid4().hex
    pushed_at = int(time.time())
    jid = python_job("InteropSleeper").perform_async(token)
    wait_until(lambda: db.sismember(SLEEPING_KEY, token), timeout=10)
    wait_until(lambda: hget(db, identity, "busy") == "1" and db.exists(f"{identity}:workers"), timeout=5)

    seen = ruby("cluster.rb")
    [process] = seen["processes"]
    match = IDENTITY.match(process["identity"])
    assert match and process["identity"] == identity
    assert process["hostname"] == match["host"] == socket.gethostname()
    assert process["pid"] == int(match["pid"]) == worker.pid
    assert process["concurrency"] == 2
    assert process["queues"] == ["default"]
    assert process["busy"] == 1
    assert process["quiet"] == "false" and process["stopping"] is False
    assert process["tag"] == "" and process["labels"] == []
    assert process["started_at"] <= process["beat"] <= time.time() + 0.5
    assert process["beat"] > time.time() - 5, "heartbeat is fresh"
    assert process["rss"] > 0 and process["rtt_us"] >= 0

    # Sidekiq::Workers (6.4.1 reads <identity>:workers) lists the sleeping job.
    [busy] = seen["workers"]
    assert busy["process"] == identity
    assert re.fullmatch(r"[0-9a-z]+", busy["thread"])
    work: dict[str, Any] = busy["work"]
    assert work["queue"] == "default"
    assert isinstance(work["run_at"], int) and pushed_at - 1 <= work["run_at"] <= time.time()
    assert work["payload"]["class"] == "InteropSleeper"
    assert work["payload"]["args"] == [token]
    assert work["payload"]["jid"] == jid
    assert work["payload"]["queue"] == "default"
    assert seen["workers_size"] == 1 and seen["stats"]["workers_size"] == 1
    assert seen["stats"]["processes_size"] == 1

    # Two more jobs, one failing; then let the sleeper finish. Stats are flushed by the heartbeat.
    python_job("InteropRecorder").perform_async("counted")
    python_job("InteropNoRetry").perform_async("counted as failed")
    db.set(f"{RELEASE_KEY}:{token}", 1)
    wait_until(lambda: db.llen(PERFORMED_KEY) == 1 and db.zcard("dead") == 1, timeout=10)
    wait_until(lambda: db.get("stat:processed") == b"3" and hget(db, identity, "busy") == "0", timeout=10)
    wait_until(lambda: not db.exists(f"{identity}:workers"), timeout=5)

    seen = ruby("cluster.rb")
    assert seen["stats"] == {
        "processed": 3,
        "failed": 1,
        "processes_size": 1,
        "workers_size": 0,
        "processed_today": 3,
        "failed_today": 1,
    }
    assert seen["workers"] == []
    assert [p["busy"] for p in seen["processes"]] == [0]


def test_ruby_quiet_and_stop_control_asynctask_worker(
    ruby: RunRuby, services: Services, python_job: PythonJob, db: redis.Redis
) -> None:
    worker, identity = services.python_worker(heartbeat=1.0)
    assert ruby("signal.rb", "quiet") == [identity]
    # The signal is read at the next heartbeat; the one after reports quiet.
    wait_until(lambda: hget(db, identity, "quiet") == "true", timeout=10)
    [process] = ruby("cluster.rb")["processes"]
    assert process["identity"] == identity
    assert process["quiet"] == "true" and process["stopping"] is True
    assert worker.running()

    # A quiet worker takes no new job.
    python_job("InteropRecorder").perform_async("not now")
    wait_for_beats(lambda: float(hget(db, identity, "beat") or 0))
    assert db.llen("queue:default") == 1 and db.llen(PERFORMED_KEY) == 0

    assert ruby("signal.rb", "stop") == [identity]
    assert worker.wait(timeout=20) == 0
    assert "TERM" in worker.log()
    assert ruby("cluster.rb")["processes"] == []
    assert not db.sismember("processes", identity)
    assert db.llen("queue:default") == 1, "the waiting job is still queued"
