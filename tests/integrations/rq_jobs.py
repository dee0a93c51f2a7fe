"""RQ job functions of the RQ integration's tests, made submittable at import.

Three processes import this module: the test (to create tasks), ``rq worker`` (RQ finds each
function by its dotted name, so the worker's ``PYTHONPATH`` must hold the repository) and
``asynctask api -r`` in the browser test. The functions append a line to the file named by
``RQ_TEST_RUNS`` for each run (``start <jid> <pid> <time>``), as tests/jobs/broker_jobs.py does.
"""

from __future__ import annotations

import os
import time
from typing import Any
from urllib.parse import urlsplit

import psutil
from rq import Retry

from asynctask import JobFailed, current_job
from asynctask.integrations.rq import TrackedWorker, submittable

QUEUE = "asynctask-rq-tests"

#: One item of the mixed task: "ok" succeeds, "failed" raises JobFailed, "error" a RuntimeError.
ITEM_SCHEMA = {
    "type": "object",
    "required": ["n", "kind"],
    "properties": {"n": {"type": "integer"}, "kind": {"enum": ["ok", "failed", "error"]}},
}


def _note(event: str) -> None:
    path = os.environ.get("RQ_TEST_RUNS")
    if path:
        line = f"{event} {current_job().jid} {os.getpid()} {time.time():.6f}\n"
        # One write of one short line to an O_APPEND file: lines of concurrent writers never mix.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def mixed(chunk: list[dict[str, Any]]) -> None:
    """Process items: "ok" ones succeed, "failed" ones are refused, "error" ones crash; each
    chunk first takes ``RQ_TEST_PAUSE`` seconds (default none)."""
    _note("start")
    time.sleep(float(os.environ.get("RQ_TEST_PAUSE", "0")))
    for item in chunk:
        current_job().log(f"item {item['n']}: {item['kind']}")
        if item["kind"] == "failed":
            raise JobFailed(f"item {item['n']} refused")
        if item["kind"] == "error":
            raise RuntimeError(f"item {item['n']} broke")
        current_job().progress(1, 1)


def slow(chunk: list[Any]) -> None:
    """Take ``RQ_TEST_SLOW`` seconds (default 0.3) per chunk."""
    _note("start")
    time.sleep(float(os.environ.get("RQ_TEST_SLOW", "0.3")))
    _note("end")


def sleepy(chunk: list[Any]) -> None:
    """Outlive any time limit a test gives it."""
    _note("start")
    time.sleep(60)


def patient(chunk: list[Any]) -> None:
    """Run until the task is cancelled (at most 20 s), then say so and return."""
    _note("start")
    deadline = time.monotonic() + 20
    while not current_job().cancelled:
        if time.monotonic() > deadline:
            raise RuntimeError("the task was never cancelled")
        time.sleep(0.05)
    current_job().log("saw the task cancelled")


def halfway(chunk: list[Any]) -> None:
    """Say how far it got, then wait for its task to be cancelled (at most 20 s)."""
    current_job().log("halfway there")
    current_job().progress(1, 2)
    deadline = time.monotonic() + 20
    while not current_job().cancelled and time.monotonic() < deadline:
        time.sleep(0.05)


def redis_connections(chunk: list[Any]) -> None:
    """Log how many connections to RQ's Redis this work horse opened (those it inherited from
    its worker are the worker's too)."""
    port = urlsplit(os.environ["RQ_REDIS_URL"]).port

    def held(process: psutil.Process) -> set[Any]:
        return {c.laddr for c in process.net_connections(kind="tcp") if c.raddr and c.raddr.port == port}

    opened = held(psutil.Process()) - held(psutil.Process().parent())
    current_job().log(f"redis connections: {len(opened)}")


def called_back(summary: dict[str, Any]) -> None:
    """A task's callback (run untracked): notes ``called-<status> <task id>``."""
    line = f"called-{summary['status']} {summary['task_id']} {os.getpid()} {time.time():.6f}\n"
    fd = os.open(os.environ["RQ_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def untracked(number: int) -> int:
    """A plain RQ job: enqueued without a task, never tracked."""
    return number + 1


mixed_job = submittable(mixed, queue=QUEUE, name="rq_mixed", item_schema=ITEM_SCHEMA, retry=Retry(max=2))
slow_job = submittable(slow, queue=QUEUE, name="rq_slow", retry=Retry(max=2))
patient_job = submittable(patient, queue=QUEUE, name="rq_patient")
halfway_job = submittable(halfway, queue=QUEUE, name="rq_halfway")
sleepy_job = submittable(sleepy, queue=QUEUE, name="rq_sleepy", retry=Retry(max=1), timeout=2)
connections_job = submittable(redis_connections, queue=QUEUE, name="rq_redis_connections")
called_back_job = submittable(called_back, queue=QUEUE, name="rq_called_back")


class CallbackWorker(TrackedWorker):
    """A tracked worker whose own process imports this module: RQ imports a job's module only in
    the work horse that runs it, and the worker process sends the due callbacks of the jobs it
    knows."""
