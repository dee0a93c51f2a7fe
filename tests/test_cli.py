"""The ``asynctask`` command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from asynctask import Settings
from asynctask.cli import main
from asynctask.keys import Keys
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parent.parent


def test_enqueue_pushes_a_job_from_the_shell(
    settings: Settings, conn: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "enqueue",
        "SleepWorker",
        '[3600, "ü"]',
        "--redis",
        settings.redis_url,
        "--namespace",
        settings.namespace,
    ]
    assert main([*argv, "--queue", "low", "--retry", "3"]) == 0
    jid = capsys.readouterr().out.strip()
    [raw] = conn.lrange(Keys(settings.namespace).queue("low"), 0, -1)
    job = json.loads(raw)
    assert (job["jid"], job["class"], job["args"], job["retry"]) == (jid, "SleepWorker", [3600, "ü"], 3)
    assert main([*argv, "--in", "60"]) == 0
    assert conn.zcard(Keys(settings.namespace).schedule) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["enqueue", "X", "{not json"], "ARGS must be a JSON array"),
        (["enqueue", "X", '{"a": 1}'], "job args must be a list"),
        (["worker", "-q", "a,b"], "queue weight must be an integer"),
        (["worker", "-c", "0"], "concurrency must be at least 1"),
        (["worker", "-r", "no_such_module_here"], "no module 'no_such_module_here' in "),
        (["worker", "-r", "missing/file.py"], "no such file"),
    ],
)
def test_bad_input_is_a_clear_error(argv: list[str], message: str, capfd: pytest.CaptureFixture[str]) -> None:
    # At the file descriptor: the worker's child process loads the -r modules and says what failed.
    assert main(argv) == 2
    assert message in capfd.readouterr().err


def test_worker_command_runs_jobs_with_weighted_queues_and_logs_them(
    settings: Settings, conn: redis.Redis
) -> None:
    keys = Keys(settings.namespace)
    for queue in ("critical", "default"):
        conn.lpush(
            keys.queue(queue),
            json.dumps({"class": "record_jid", "args": [0], "jid": queue * 2, "retry": True}),
        )
    env = {**os.environ, "ASYNCTASK_REDIS_URL": settings.redis_url, "ASYNCTASK_LOG_FORMAT": "json"}
    command = [sys.executable, "-m", "asynctask", "worker", "-r", "tests/jobs/crash_jobs.py", "--namespace"]
    command += [settings.namespace, "-q", "critical,3", "-q", "default", "-c", "2", "-v"]
    env["ASYNCTASK_NAMESPACE"] = settings.namespace
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_until(lambda: conn.scard(f"{settings.namespace}:test:done") == 2, timeout=15)
        time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0
    lines = [json.loads(line) for line in err.decode().splitlines()]
    done = [line for line in lines if line["msg"] == "done"]
    assert {line["jid"] for line in done} == {"criticalcritical", "defaultdefault"}
    assert all(line["elapsed"] >= 0 and line["class"] == "record_jid" for line in done)
    started = next(line for line in lines if line["msg"] == "worker started")
    assert started["queues"] == "critical,3 default" and started["concurrency"] == 2
