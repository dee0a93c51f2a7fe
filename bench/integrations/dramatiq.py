"""Dramatiq with AsyncTask's tracking attached, against Dramatiq alone.

Both drains run one ``dramatiq`` worker process with Dramatiq's default 8 threads, on a
``RedisBroker`` with Dramatiq's default middleware, draining no-op jobs queued before it
started. Tracked: the jobs are the chunks of one task (``create_task``, ``chunk_size=1``) and
the worker has ``Tracking`` attached, with its defaults (the flusher is a child process of the
worker process). Untracked: the same messages sent with ``group(...).run()`` (Dramatiq has no bulk
enqueue: a group sends one message per job) to a worker without it.

The worker processes load this module (``dramatiq bench.integrations.dramatiq:worker_broker``)
and read their broker from ``BENCH_DRAMATIQ_*``. Each job appends the time it ended to a marker
file (one fixed-size record, on an ``O_APPEND`` descriptor opened once), so a drain is timed as
the workers saw it: from the first job's end to the last's, over the jobs between them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from sqlalchemy import delete, select

from asynctask import Client, Settings, Tracking
from asynctask.db.engine import create_database_engine, writer
from asynctask.db.migrate import upgrade
from asynctask.integrations.dramatiq import Tracking as TrackingMiddleware
from asynctask.tracking.models import Event, EventMessage, Task
from bench.core import procs

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "bench"
#: Dramatiq's default number of worker threads per process.
THREADS = 8
#: One record per job: the time it ended, ``%17.6f\n``.
RECORD = 18
#: Seconds a drain may take before the bench gives up on it.
TIMEOUT = 600.0


def _broker(redis_url: str, namespace: str) -> RedisBroker:
    return RedisBroker(url=redis_url, namespace=namespace)  # type: ignore[no-untyped-call]


def _declare(broker: RedisBroker, marker: int) -> dramatiq.Actor[[list[Any]], None]:
    def bench_noop(items: list[Any]) -> None:
        if marker >= 0:
            os.write(marker, b"%17.6f\n" % time.time())

    return dramatiq.actor(broker=broker, queue_name=QUEUE, max_retries=0)(bench_noop)


def worker_broker() -> None:
    """The workers' broker (``dramatiq`` calls this in each worker process)."""
    broker = _broker(os.environ["BENCH_DRAMATIQ_REDIS_URL"], os.environ["BENCH_DRAMATIQ_NAMESPACE"])
    if os.environ.get("BENCH_DRAMATIQ_TRACKED") == "1":
        broker.add_middleware(TrackingMiddleware())
    marker = os.open(os.environ["BENCH_DRAMATIQ_MARKER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    dramatiq.set_broker(broker)
    _declare(broker, marker)


def noop_rate(redis_url: str, database_url: str, jobs: int, tracked: bool) -> float:
    """Jobs/s of the runtime's workers draining `jobs` no-op jobs already queued; tracked: the jobs are
    a task's chunks (create_task, chunk_size=1) and the worker has tracking attached; untracked: the same
    jobs sent with the runtime's own bulk send to a worker without tracking. Timed from the first job
    started to the last done, as the runtime sees it (not counting SQL catching up)."""
    run = _Run(redis_url, database_url)
    try:
        if tracked:
            run.create_task(jobs)
        else:
            run.group_send(jobs)
        return run.drain(jobs, tracked)
    finally:
        run.close()


def create_seconds(redis_url: str, database_url: str, items: int) -> tuple[float, float]:
    """(seconds of asynctask.create_task of `items` items, chunk_size=1, through the runtime's client;
    seconds of the runtime's own fastest bulk send of the same number of jobs). No worker runs."""
    run = _Run(redis_url, database_url)
    try:
        created = run.create_task(items)
        run.clear_queue()
        sent = run.group_send(items)
        return created, sent
    finally:
        run.close()


class _Run:
    """One call's private namespaces, its sending broker, and what it must clean up."""

    def __init__(self, redis_url: str, database_url: str) -> None:
        suffix = uuid.uuid4().hex[:10]
        self.redis_url = redis_url
        self.database_url = database_url
        self.namespaces = (f"bench-dq-{suffix}", f"bench-at-{suffix}")
        self.broker = _broker(redis_url, self.namespaces[0])
        self.actor = _declare(self.broker, -1)
        self.settings = Settings(redis_url=redis_url, namespace=self.namespaces[1], database_url=database_url)
        self.task_ids: list[str] = []
        self.directory = Path(tempfile.mkdtemp(prefix="bench-dramatiq-"))
        self.marker = self.directory / "marker"

    def create_task(self, items: int) -> float:
        upgrade(self.database_url)
        engine = create_database_engine(self.database_url)
        client = Client(self.settings)
        try:
            began = time.perf_counter()
            view = Tracking(client, engine).create_task(self.actor, ([n] for n in range(items)))
            elapsed = time.perf_counter() - began
            self.task_ids.append(view.id)
            return elapsed
        finally:
            client.close()
            engine.dispose()

    def group_send(self, items: int) -> float:
        began = time.perf_counter()
        dramatiq.group((self.actor.message([n]) for n in range(items)), broker=self.broker).run()  # type: ignore[no-untyped-call]
        return time.perf_counter() - began

    def clear_queue(self) -> None:
        self.broker.flush(QUEUE)

    def drain(self, jobs: int, tracked: bool) -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTASK_", "BENCH_DRAMATIQ_"))}
        env |= {
            "PYTHONPATH": str(ROOT),
            "BENCH_DRAMATIQ_REDIS_URL": self.redis_url,
            "BENCH_DRAMATIQ_NAMESPACE": self.namespaces[0],
            "BENCH_DRAMATIQ_MARKER": str(self.marker),
            "BENCH_DRAMATIQ_TRACKED": "1" if tracked else "0",
            "ASYNCTASK_REDIS_URL": self.redis_url,
            "ASYNCTASK_NAMESPACE": self.namespaces[1],
            "ASYNCTASK_DATABASE_URL": self.database_url,
        }
        command = [
            sys.executable,
            "-m",
            "dramatiq",
            f"{__name__}:worker_broker",
            "-p",
            "1",
            "-t",
            str(THREADS),
        ]
        log = (self.directory / "worker.log").open("wb")
        worker = subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        try:
            deadline = time.monotonic() + TIMEOUT
            while not self.marker.exists() or self.marker.stat().st_size < jobs * RECORD:
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the Dramatiq worker drained {self._done()} of {jobs} jobs:\n"
                        + (self.directory / "worker.log").read_text(errors="replace")[-3000:]
                    )
                time.sleep(0.005)
        finally:
            procs.stop(worker, grace=30)
        ends = sorted(float(line) for line in self.marker.read_text().split())
        return (len(ends) - 1) / (ends[-1] - ends[0])

    def _done(self) -> int:
        return self.marker.stat().st_size // RECORD if self.marker.exists() else 0

    def close(self) -> None:
        self.broker.close()
        connection = redis.Redis.from_url(self.redis_url)
        try:
            for namespace in self.namespaces:
                keys = list(connection.scan_iter(match=f"{namespace}:*", count=1000))
                for start in range(0, len(keys), 500):
                    connection.unlink(*keys[start : start + 500])
        finally:
            connection.close()
        if self.task_ids:
            engine = create_database_engine(self.database_url)
            try:
                with writer(engine).begin() as connection_sql:
                    events = select(Event.id).where(Event.task_id.in_(self.task_ids))
                    connection_sql.execute(delete(EventMessage).where(EventMessage.event_id.in_(events)))
                    connection_sql.execute(delete(Event).where(Event.task_id.in_(self.task_ids)))
                    connection_sql.execute(delete(Task).where(Task.id.in_(self.task_ids)))
            finally:
                engine.dispose()
        for path in self.directory.iterdir():
            path.unlink()
        self.directory.rmdir()
