"""Celery in the integrations section: its own worker with and without ``track(app)``, and
``create_task`` through Celery's client against Celery's own bulk send.

The worker is one ``celery worker`` with Celery's defaults for a no-op task (the prefork pool,
one process per core, prefetch multiplier 4, acknowledgement on receipt, no result backend);
it loads this module (``-A bench.integrations.celery``), whose app is made from the
``BENCH_CELERY_*`` environment and tracked when ``BENCH_CELERY_TRACKED`` is set. The no-op
appends its end time to the O_APPEND file ``BENCH_CELERY_MARKER``: one small write per job,
the same tracked or not, read back to time the drain as the worker saw it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from asynctask import Client, Registry, Settings, Tracking
from asynctask.db.engine import create_database_engine
from asynctask.integrations.celery import submittable, track
from bench.core import procs

ROOT = Path(__file__).resolve().parents[2]
TASK = "bench_celery.noop"
#: Seconds a drain may take per thousand jobs before the call gives up.
DRAIN_SECONDS_PER_1000 = 10.0

_marker_path = os.environ.get("BENCH_CELERY_MARKER")
# Opened once at import: a per-job open would cost more than the job itself.
_marker = os.open(_marker_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _marker_path else -1


def noop(chunk: list[Any]) -> None:
    os.write(_marker, b"%.6f\n" % time.time())


def make_app(broker: str, queue: str) -> Celery:
    app = Celery("bench_celery", broker=broker, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        task_ignore_result=True,
        worker_enable_remote_control=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )
    app.task(name=TASK)(noop)
    return app


app = make_app(
    os.environ.get("BENCH_CELERY_BROKER", "memory://"), os.environ.get("BENCH_CELERY_QUEUE", "celery")
)
if os.environ.get("BENCH_CELERY_TRACKED"):
    track(app)


def noop_rate(redis_url: str, database_url: str, jobs: int, tracked: bool) -> float:
    """Jobs/s of one Celery worker draining ``jobs`` no-op jobs already queued; tracked: the
    jobs are one task's chunks (``create_task``, chunk size 1) and the worker is tracked;
    untracked: the same jobs sent with ``apply_async`` on one producer to an untracked worker.
    Timed from the first job's end to the last's, as the worker wrote them."""
    with _rig(redis_url, database_url) as rig:
        if tracked:
            rig.tracking.create_task(rig.job, range(jobs), chunk_size=1)
        else:
            _bulk_send(rig.app, jobs)
        marker = rig.workdir / "marker"
        env = rig.env(BENCH_CELERY_MARKER=str(marker))
        if tracked:
            env["BENCH_CELERY_TRACKED"] = "1"
        command = [sys.executable, "-m", "celery", "-A", "bench.integrations.celery", "worker"]
        command += ["-Q", rig.queue, "-l", "WARNING", "--without-gossip", "--without-mingle"]
        command += ["--without-heartbeat", "-n", f"{rig.queue}@%h"]
        worker = procs.spawn(command, env=env, cwd=ROOT, log=rig.workdir / "worker.log")
        try:
            ends = _wait_for(marker, jobs, worker, rig.workdir / "worker.log")
        finally:
            procs.stop(worker, grace=15)
        return (jobs - 1) / (ends[-1] - ends[0])


def create_seconds(redis_url: str, database_url: str, items: int) -> tuple[float, float]:
    """(seconds of ``create_task`` of ``items`` items, chunk size 1, through Celery's client;
    seconds of Celery's own bulk send of as many jobs: ``apply_async`` on one producer). No
    worker runs."""
    with _rig(redis_url, database_url) as rig:
        started = time.perf_counter()
        rig.tracking.create_task(rig.job, range(items), chunk_size=1)
        created = time.perf_counter() - started
        rig.conn.delete(rig.queue)
        started = time.perf_counter()
        _bulk_send(rig.app, items)
        sent = time.perf_counter() - started
        return created, sent


def _bulk_send(app: Celery, count: int) -> None:
    """Celery's fastest way to send many messages of one task: one producer (one connection)
    for all of them (what ``group.apply_async`` does too, after building a signature each)."""
    task = app.tasks[TASK]
    with app.producer_or_acquire() as producer:
        for n in range(count):
            task.apply_async(args=[[n]], producer=producer)


class _Rig:
    def __init__(self, redis_url: str, database_url: str, workdir: Path) -> None:
        self.redis_url = redis_url
        self.queue = f"bench-celery-{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        self.conn = redis.Redis.from_url(redis_url)
        self.settings = Settings(redis_url=redis_url, namespace=self.queue, database_url=database_url)
        self.app = make_app(redis_url, self.queue)
        self.registry = Registry()
        self.job = submittable(self.app.tasks[TASK], registry=self.registry)
        self.client = Client(self.settings, registry=self.registry)
        self.engine = create_database_engine(database_url)
        self.tracking = Tracking(self.client, self.engine)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTASK_", "BENCH_CELERY_"))}
        return env | {
            "PYTHONPATH": str(ROOT),
            "BENCH_CELERY_BROKER": self.redis_url,
            "BENCH_CELERY_QUEUE": self.queue,
            "ASYNCTASK_REDIS_URL": self.settings.redis_url,
            "ASYNCTASK_NAMESPACE": self.settings.namespace,
            "ASYNCTASK_DATABASE_URL": self.settings.database_url,
            **extra,
        }

    def close(self) -> None:
        self.client.close()
        self.engine.dispose()
        self.app.close()
        self.conn.close()


@contextmanager
def _rig(redis_url: str, database_url: str) -> Iterator[_Rig]:
    """Celery and AsyncTask on the caller's Redis database; every key made meanwhile (the
    queue, kombu's bindings and unacknowledged set, the AsyncTask namespace) deleted after."""
    conn = redis.Redis.from_url(redis_url)
    before = set(conn.scan_iter(count=1000))
    with tempfile.TemporaryDirectory(prefix="bench-celery-") as workdir:
        rig = _Rig(redis_url, database_url, Path(workdir))
        try:
            yield rig
        finally:
            rig.close()
            made = [key for key in conn.scan_iter(count=1000) if key not in before]
            for start in range(0, len(made), 500):
                conn.delete(*made[start : start + 500])
            conn.close()


def _wait_for(marker: Path, jobs: int, worker: Any, log: Path) -> list[float]:
    """The end times the worker wrote, once there are ``jobs`` of them, sorted."""
    deadline = time.monotonic() + 30 + DRAIN_SECONDS_PER_1000 * jobs / 1000
    while True:
        text = marker.read_bytes() if marker.exists() else b""
        lines = text.count(b"\n")
        if lines >= jobs:
            return sorted(float(line) for line in text.splitlines()[:jobs])
        if worker.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
            raise RuntimeError(f"celery worker drained {lines} of {jobs} jobs: {tail}")
        time.sleep(0.05)
