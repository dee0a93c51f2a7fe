"""RQ with AsyncTask tracking attached, against RQ alone (the integrations section).

One ``rq worker`` process, RQ's default ``Worker`` (a work horse forked per job, its only way of
running jobs concurrently is more worker processes), runs the same no-op job both ways:
``builtins.len``, which RQ calls by its dotted name, so that no job module is imported into
each work horse and the comparison is the two workers' own per-job costs.

- tracked: the jobs are the chunks of one task (``create_task``, ``chunk_size=1``, sent by
  ``asynctask.integrations.rq``), run by ``-w asynctask.integrations.rq.TrackedWorker``;
- untracked: the same number of jobs sent with ``Queue.enqueue_many`` to ``rq worker``.

The rate is RQ's own view: from the earliest ``started_at`` to the latest ``ended_at`` of the
jobs (RQ's job hashes), once the queue has drained; the tracking database may still be
catching up then, and is not waited for.

Everything a call creates is removed before it returns: the RQ keys of its queue, its jobs and
its workers, AsyncTask's keys (a namespace of its own) and, for tracked runs, its task's rows.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import redis
from rq import Queue
from rq.job import Job
from rq.registry import FinishedJobRegistry
from sqlalchemy import delete

from asynctask import Client, Registry, Settings, Tracking
from asynctask.db.engine import create_database_engine, writer
from asynctask.db.migrate import upgrade
from asynctask.integrations.rq import RqSender
from asynctask.middleware import Chain
from asynctask.tasks.runtime import RuntimeJob, register
from asynctask.tracking.models import Event, EventMessage, Task
from bench.core import procs

ROOT = Path(__file__).resolve().parents[2]
#: The no-op job: a builtin, found by RQ by name without importing anything.
NOOP = len
#: Jobs per ``enqueue_many`` pipeline of RQ's own bulk send: RQ's fastest measured here
#: (one pipeline of 100,000 jobs was slower and holds every job in memory at once).
RQ_BATCH = 1000
#: Seconds a drain may take per job before the run is given up as stuck.
SECONDS_PER_JOB = 0.1
#: Seconds RQ keeps a finished job, its result and times: longer than any call.
RESULTS_TTL = 86_400
TRACKED = "asynctask.integrations.rq.TrackedWorker"
UNTRACKED = "rq.worker.Worker"


def noop_rate(redis_url: str, database_url: str, jobs: int, tracked: bool) -> float:
    """Jobs/s of the runtime's workers draining `jobs` no-op jobs already queued; tracked: the jobs are
    a task's chunks (create_task, chunk_size=1) and the worker has tracking attached; untracked: the same
    jobs sent with the runtime's own bulk send to a worker without tracking. Timed from the first job
    started to the last done, as the runtime sees it (not counting SQL catching up)."""
    with _run(redis_url, database_url) as run:
        if tracked:
            run.create_task(jobs)
        else:
            run.bulk_send(jobs)
        ids = run.queue.get_job_ids()
        run.ids.update(ids)
        if len(ids) != jobs:
            raise RuntimeError(f"{len(ids)} of {jobs} jobs queued")
        worker = run.worker(TRACKED if tracked else UNTRACKED)
        finished = FinishedJobRegistry(queue=run.queue)
        deadline = time.monotonic() + 30 + jobs * SECONDS_PER_JOB
        while finished.count < jobs:
            if worker.poll() is not None:
                raise RuntimeError(f"the RQ worker exited with {worker.returncode}; see {run.log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{finished.count} of {jobs} jobs done in time; see {run.log}")
            time.sleep(0.1)
        first, last = _span(run.queue.connection, ids)
        return jobs / (last - first).total_seconds()


def create_seconds(redis_url: str, database_url: str, items: int) -> tuple[float, float]:
    """(seconds of asynctask.create_task of `items` items, chunk_size=1, through the runtime's client;
    seconds of the runtime's own fastest bulk send of the same number of jobs). No worker runs."""
    with _run(redis_url, database_url) as run:
        started = time.perf_counter()
        run.create_task(items)
        create = time.perf_counter() - started
    with _run(redis_url, database_url) as run:
        started = time.perf_counter()
        run.bulk_send(items)
        bulk = time.perf_counter() - started
    return create, bulk


def _span(conn: redis.Redis, ids: list[str]) -> tuple[datetime, datetime]:
    """The earliest start and the latest end of the jobs ``ids``, as RQ stored them."""
    starts: list[datetime] = []
    ends: list[datetime] = []
    for start in range(0, len(ids), 1000):
        for job in Job.fetch_many(ids[start : start + 1000], connection=conn):
            if job is None or job.started_at is None or job.ended_at is None:
                raise RuntimeError("a finished job has no start or end time")
            starts.append(job.started_at)
            ends.append(job.ended_at)
    return min(starts), max(ends)


class _Run:
    """One call's queue, AsyncTask namespace, tracking and workers, all its own."""

    def __init__(self, redis_url: str, database_url: str) -> None:
        token = secrets.token_hex(4)
        self.redis_url = redis_url
        self.name = f"bench-rq-{token}"
        self.conn = redis.Redis.from_url(redis_url)
        self.queue = Queue(self.name, connection=self.conn)
        self.settings = Settings(redis_url=redis_url, namespace=self.name, database_url=database_url)
        self.client = Client(self.settings, registry=Registry(), middleware=Chain())
        self.engine = create_database_engine(database_url)
        self.tracking = Tracking(self.client, self.engine)
        sender = RqSender(NOOP, self.name, self.conn, None, None)
        self.job = register(
            RuntimeJob(NOOP, "bench_rq_noop", runtime="rq", queue=self.name, sender=sender),
            self.client.registry,
        )
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"{self.name}.log"
        self.workers: list[subprocess.Popen[bytes]] = []
        #: The tasks and RQ job ids this run created (jobs still queued are found at the end).
        self.tasks: list[str] = []
        self.ids: set[str] = set()

    def create_task(self, items: int) -> None:
        self.tasks.append(self.tracking.create_task(self.job, range(items), chunk_size=1).id)

    def bulk_send(self, jobs: int) -> None:
        """RQ's own bulk send: ``enqueue_many`` of prepared jobs, one pipeline per ``RQ_BATCH``."""
        for start in range(0, jobs, RQ_BATCH):
            datas = [Queue.prepare_data(NOOP, args=([n],)) for n in range(start, min(start + RQ_BATCH, jobs))]
            with self.conn.pipeline() as pipeline:
                sent = self.queue.enqueue_many(datas, pipeline=pipeline)
                pipeline.execute()
            self.ids.update(job.id for job in sent)

    def worker(self, worker_class: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTASK_", "RQ_"))}
        env |= {
            "PYTHONPATH": str(ROOT),
            "ASYNCTASK_REDIS_URL": self.redis_url,
            "ASYNCTASK_NAMESPACE": self.name,
            "ASYNCTASK_DATABASE_URL": self.settings.database_url,
        }
        command = [sys.executable, "-m", "rq.cli", "worker", "--quiet", "-w", worker_class]
        # Results (and so the jobs' start and end times) kept until the call ends: RQ's default
        # of 500 s is shorter than a long drain, whose first jobs would be gone when it is timed.
        command += [
            "--results-ttl",
            str(RESULTS_TTL),
            "--url",
            self.redis_url,
            "--name",
            self.name,
            self.name,
        ]
        with self.log.open("ab") as out:
            proc = subprocess.Popen(
                command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.workers.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.workers:
            procs.stop(proc, grace=30)
        self._forget_tasks()
        self._unlink()
        self.client.broker.close()
        self.engine.dispose()
        self.conn.close()
        self.log.unlink(missing_ok=True)

    def _forget_tasks(self) -> None:
        with writer(self.engine).begin() as connection:
            for task in self.tasks:
                events = Event.__table__.select().with_only_columns(Event.id).where(Event.task_id == task)
                connection.execute(delete(EventMessage).where(EventMessage.event_id.in_(events)))
                connection.execute(delete(Event).where(Event.task_id == task))
                connection.execute(delete(Task).where(Task.id == task))

    def _unlink(self) -> None:
        """Every key of this run: RQ's keys naming its queue, one of its jobs or its worker, and
        AsyncTask's namespace."""
        jobs = self.ids | set(self.queue.get_job_ids())
        doomed = [
            key
            for key in self.conn.scan_iter(match="rq:*", count=10_000)
            if self.name in key.decode() or any(part in jobs for part in key.decode().split(":"))
        ]
        doomed += list(self.conn.scan_iter(match=f"{self.name}:*", count=10_000))
        for start in range(0, len(doomed), 1000):
            self.conn.unlink(*doomed[start : start + 1000])
        self.conn.srem("rq:queues", self.queue.key)
        self.conn.srem("rq:workers", f"rq:worker:{self.name}")


@contextmanager
def _run(redis_url: str, database_url: str) -> Iterator[_Run]:
    upgrade(database_url)
    run = _Run(redis_url, database_url)
    try:
        yield run
    finally:
        run.close()
