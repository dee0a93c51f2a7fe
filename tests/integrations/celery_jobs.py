"""Celery tasks of tests/integrations/test_celery.py, run by real workers:
``celery -A tests.integrations.celery_jobs worker``.

The worker's app is made from the environment (``CELERY_TEST_BROKER``, ``CELERY_TEST_QUEUE``)
and tracked with ``track(app)`` from ``ASYNCTASK_*``; the test process makes its own app with
``make_app`` to send through, untracked. Runs are appended to ``CELERY_TEST_RUNS`` as
``<event> <jid> <pid> <time>`` lines, so a test can tell which jobs ran, where and when.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from celery import Celery, Task

from asynctask import JobFailed, current_job
from asynctask.integrations.celery import submittable, track
from asynctask.tracking import tracker

#: Items of the 100-item task that are business failures, and those that always break.
FAILED = frozenset(n for n in range(100) if n % 20 in (3, 7, 11))
BROKEN = frozenset(n for n in range(100) if n % 10 == 9)
#: The hard time limit of ``limited`` and the soft one of ``softly_limited``, in seconds.
TIME_LIMIT = 1
#: Seconds after its sending that a message of ``expiring`` expires.
EXPIRES = 1


def note(event: str) -> None:
    path = os.environ.get("CELERY_TEST_RUNS")
    if path:
        with open(path, "a") as runs:
            runs.write(f"{event} {current_job().jid} {os.getpid()} {time.time()}\n")


def check(n: int) -> None:
    current_job().log(f"item {n}")
    if n in FAILED:
        raise JobFailed(f"item {n} is not allowed")
    if n in BROKEN:
        raise RuntimeError(f"item {n} broke")


def handle(chunk: list[int]) -> None:
    """Each item: succeeds, fails (JobFailed), or breaks (retried twice by autoretry_for)."""
    for n in chunk:
        check(n)


def paced(chunk: list[int]) -> None:
    """``handle``, after ``CELERY_TEST_PAUSE`` seconds, noted as a start."""
    note("start")
    time.sleep(float(os.environ.get("CELERY_TEST_PAUSE", "0.25")))
    handle(chunk)


def explicit(self: Task, chunk: list[int]) -> None:
    """The same outcomes, retried by an explicit ``self.retry`` of every exception."""
    try:
        for n in chunk:
            check(n)
    except Exception as exc:
        raise self.retry(exc=exc, countdown=0.05) from exc


def slow(chunk: list[int]) -> None:
    note("start")
    time.sleep(0.3)
    current_job().log("cancelled seen" if current_job().cancelled else "not cancelled")


def steady(chunk: list[int]) -> None:
    note("start")
    current_job().progress(0, 1)
    time.sleep(0.15)
    current_job().progress(1, 1)
    note("done")


def limited(chunk: list[int]) -> None:
    note("start")
    time.sleep(30)


def sleepy(chunk: list[int]) -> None:
    """Runs until stopped (at most 30 s), then takes a moment to clean up."""
    note("start")
    try:
        time.sleep(30)
    finally:
        time.sleep(0.5)


def fragile(chunk: list[int]) -> None:
    """Kills its own pool process on its first ``chunk[0]`` runs, then returns. It waits first
    for what the process recorded to go out: acknowledged early, a run whose process dies
    takes what the process recorded in its last ``SEND_INTERVAL`` with it."""
    note("start")
    time.sleep(0.3)
    with open(os.environ["CELERY_TEST_RUNS"]) as runs:
        ran = sum(line.split()[:2] == ["start", current_job().jid] for line in runs)
    if ran <= chunk[0]:
        os.kill(os.getpid(), signal.SIGKILL)


def plain(self: Task, chunk: list[int]) -> None:
    """Writes whether it ran as a tracked job: ``tracked``/``untracked`` and Celery's task id."""
    try:
        current_job()
    except RuntimeError:
        seen = "untracked"
    else:
        seen = "tracked"
    path = os.environ["CELERY_TEST_RUNS"]
    with open(path, "a") as runs:
        runs.write(f"{seen} {self.request.id} {os.getpid()} {time.time()}\n")


def picky(chunk: list[int]) -> None:
    """Refuses odd items until the file ``<CELERY_TEST_RUNS>.fixed`` exists."""
    current_job().log("fixed" if os.path.exists(f"{os.environ['CELERY_TEST_RUNS']}.fixed") else "not fixed")
    if chunk[0] % 2 and not os.path.exists(f"{os.environ['CELERY_TEST_RUNS']}.fixed"):
        raise JobFailed(f"item {chunk[0]} is odd")


def called_back(summary: dict[str, Any]) -> None:
    """A task's callback: notes ``called-<status> <task id>``."""
    with open(os.environ["CELERY_TEST_RUNS"], "a") as runs:
        runs.write(f"called-{summary['status']} {summary['task_id']} {os.getpid()} {time.time()}\n")


def make_app(broker: str, queue: str) -> Celery:
    app = Celery("celery_jobs", broker=broker, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        # Late-acknowledged messages of a killed worker come back after this long on Redis,
        # looked for every second, under a lock that a worker killed while holding it holds
        # for two seconds at most.
        broker_transport_options={
            "visibility_timeout": int(os.environ.get("CELERY_TEST_VISIBILITY_TIMEOUT", "4")),
            "unacked_restore_interval": 1,
            "unacked_mutex_expire": 2,
        },
    )
    retried = {"autoretry_for": (Exception,), "max_retries": 2, "retry_kwargs": {"countdown": 0.05}}
    app.task(name="celery_jobs.handle", **retried)(handle)
    app.task(name="celery_jobs.paced", **retried)(paced)
    app.task(name="celery_jobs.explicit", bind=True, max_retries=2)(explicit)
    app.task(name="celery_jobs.slow")(slow)
    app.task(name="celery_jobs.steady", acks_late=True, reject_on_worker_lost=True)(steady)
    app.task(name="celery_jobs.limited", time_limit=TIME_LIMIT)(limited)
    app.task(name="celery_jobs.softly_limited", soft_time_limit=TIME_LIMIT)(limited)
    app.task(name="celery_jobs.sleepy")(sleepy)
    app.task(name="celery_jobs.expiring", expires=EXPIRES)(slow)
    app.task(name="celery_jobs.plain", bind=True)(plain)
    # Retried at once (no delay): by the worker's main process, when the pool process died.
    retried_when_lost = {"retry_on_worker_lost": True, "max_retries": 2, "default_retry_delay": None}
    app.task(name="celery_jobs.fragile", **retried_when_lost)(fragile)
    app.task(name="celery_jobs.picky")(picky)
    app.task(name="celery_jobs.called_back")(called_back)
    return app


app = make_app(
    os.environ.get("CELERY_TEST_BROKER", "memory://"), os.environ.get("CELERY_TEST_QUEUE", "celery")
)
track(app)
# The worker sends the due callbacks of the jobs it knows.
submittable(app.tasks["celery_jobs.called_back"])
if "CELERY_TEST_SEND_INTERVAL" in os.environ:
    # What a run records then waits in its pool process for a write that is not the sender's:
    # its end, or the process's exit.
    tracker.SEND_INTERVAL = float(os.environ["CELERY_TEST_SEND_INTERVAL"])
