"""Tracking on vs off: one worker process drains N no-op jobs, untracked or made by create_task.

Same worker settings in every mode (one process, ``-c C``, the private Redis); only
``ASYNCTASK_TRACKING`` and ``ASYNCTASK_DATABASE_URL`` differ. The jobs are queued first
(``push_bulk``, or ``create_task`` with chunk_size=1, timed separately as *enqueue*), then
the worker is started, so that drain throughput never includes enqueueing.

Two end points per tracked run, because a job being done and SQL knowing it are not the
same moment: *executed* is the last job's marker byte (as in the runtime section), *caught
up* is the first ``get_task`` after that which reports the task finished. The bench sends
SQL nothing while jobs run: the ``get_task`` polls begin after the last job is done.
"""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis import RedisError
from sqlalchemy.exc import SQLAlchemyError

from asynctask import Client, Settings, Tracking
from asynctask.db.engine import create_database_engine
from bench.core import procs
from bench.core.redis_server import RedisServer
from bench.core.system import ROOT, asynctask_queued, clean_env
from bench.core.timing import STOP_GRACE, drain_timeout, poll_marker
from bench.core.tracked_jobs import NAME, tracked_noop_callback, tracked_noop_job

#: Interval of the get_task polls once every job is done (each is one primary-key SELECT).
SQL_POLL = 0.005
#: Seconds SQL may show no progress before the run fails: a dead flusher thread would
#: otherwise keep the bench waiting for the whole timeout.
STALL_TIMEOUT = 30.0
#: The worker's tracking stream (no namespace in the bench).
STREAM = "asynctask:tracking"


@dataclass
class DrainRun:
    #: "untracked", or the tracking database: "postgresql" / "sqlite".
    mode: str
    jobs: int
    concurrency: int
    #: push_bulk (untracked) or create_task (tracked) of all jobs, before the worker starts.
    enqueue_s: float = 0.0
    startup_s: float = 0.0  # spawn -> first job done
    steady_s: float = 0.0  # first job done -> last job done
    #: Last job done -> get_task reports the task finished (flusher lag); 0 when untracked.
    caught_up_s: float = 0.0
    #: Whether the task had an ``on_complete`` callback, and the seconds from get_task
    #: reporting it finished to the callback's marker byte.
    callback: bool = False
    callback_s: float = 0.0
    #: Tracking stream entries not yet applied and deleted when the last job was done.
    backlog_entries: int = 0
    #: Worker tree CPU seconds, first job -> last job, and first job -> caught up.
    cpu_steady_s: float = 0.0
    cpu_caught_up_s: float = 0.0
    stop_s: float = 0.0
    checks: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def tracked(self) -> bool:
        return self.mode != "untracked"

    @property
    def steady_rate(self) -> float:
        return self.jobs / self.steady_s if self.steady_s > 0 else 0.0

    @property
    def caught_up_rate(self) -> float:
        """Jobs per second from the first job done until SQL shows all of them finished."""
        span = self.steady_s + self.caught_up_s
        return self.jobs / span if span > 0 else 0.0


def worker_argv(concurrency: int) -> list[str]:
    return [
        sys.executable, "-m", "asynctask", "worker",
        "-r", "bench/core/tracked_jobs.py", "-c", str(concurrency), "-q", "default",
    ]  # fmt: skip


def drain(
    mode: str,
    database_url: str | None,
    server: RedisServer,
    jobs: int,
    concurrency: int,
    workdir: Path,
    *,
    callback: bool = False,
) -> DrainRun:
    """Queue ``jobs`` (tracked iff ``database_url``; with ``callback``, the task has an
    ``on_complete`` job), start one worker, time it until done."""
    run = DrainRun(mode, jobs, concurrency, callback=callback)
    with server.client() as conn:
        conn.flushall()
    client = Client(Settings(redis_url=server.url))
    engine = create_database_engine(database_url) if database_url else None
    tracking = Tracking(client, engine) if engine is not None else None
    try:
        try:
            task_id = _enqueue(run, client, tracking)
        except (RuntimeError, RedisError, SQLAlchemyError) as exc:
            run.error = f"enqueue failed: {type(exc).__name__}: {exc}"
            return run
        marker = workdir / f"marker-tracking-{mode}"
        marker.write_bytes(b"")
        log = workdir / f"worker-tracking-{mode}.log"
        extra = {"ASYNCTASK_TRACKING": "true" if database_url else "false"}
        if database_url:
            extra["ASYNCTASK_DATABASE_URL"] = database_url
        env = clean_env(
            ASYNCTASK_REDIS_URL=server.url, PYTHONPATH=str(ROOT), BENCH_MARKER=str(marker), **extra
        )
        spawned = time.monotonic()
        worker = procs.spawn(worker_argv(concurrency), env=env, cwd=ROOT, log=log)
        try:
            _watch(run, worker, marker, spawned, tracking, task_id, server)
        except RuntimeError as exc:
            run.error = f"{exc}; log tail: {procs.log_tail(log)}"
        finally:
            run.stop_s = procs.stop(worker, grace=STOP_GRACE)
        run.checks = _checks(server, marker, tracking, task_id)
        if run.checks["marker_bytes"] != jobs + callback and not run.error:
            run.error = f"{run.checks['marker_bytes']} jobs ran, expected {jobs + callback}"
        if tracking is not None and run.checks.get("sql_finish") != jobs and not run.error:
            run.error = f"SQL counts {run.checks.get('sql_counts')} after the run, expected {jobs} finish"
    finally:
        client.broker.close()
        if engine is not None:
            engine.dispose()
    return run


def _enqueue(run: DrainRun, client: Client, tracking: Tracking | None) -> str | None:
    # Both modes give each job the same args, [[i]]: create_task's chunk of one item.
    client.redis.ping()
    gc.collect()
    start = time.perf_counter()
    task_id = None
    if tracking is None:
        client.push_bulk({"class": NAME, "args": [[[i]] for i in range(run.jobs)]}, batch_size=1000)
    else:
        on_complete = tracked_noop_callback if run.callback else None
        task_id = tracking.create_task(
            tracked_noop_job, range(run.jobs), chunk_size=1, on_complete=on_complete
        ).id
    run.enqueue_s = time.perf_counter() - start
    queued = asynctask_queued(client.redis)
    if queued != run.jobs:
        raise RuntimeError(f"{run.mode}: enqueued {run.jobs}, {queued} in the queue")
    return task_id


def _watch(
    run: DrainRun,
    worker: Any,
    marker: Path,
    spawned: float,
    tracking: Tracking | None,
    task_id: str | None,
    server: RedisServer,
) -> None:
    timeout = drain_timeout(run.jobs)
    cpu_first = 0.0
    for poll in poll_marker(marker, run.jobs):
        if poll.started:
            cpu_first = procs.tree_usage(worker.pid, memory=False).cpu
        if poll.last:
            first, last = poll.first, poll.now
            run.cpu_steady_s = procs.tree_usage(worker.pid, memory=False).cpu - cpu_first
            break
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.returncode} after {poll.done} jobs")
        if poll.now - spawned > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s with {poll.done} of {run.jobs} jobs done")
    run.startup_s, run.steady_s = first - spawned, last - first
    if tracking is None or task_id is None:
        return
    with server.client() as conn:
        run.backlog_entries = int(conn.xlen(STREAM))
    progress, progressed = -1, last
    while True:
        view = tracking.get_task(task_id)
        now = time.monotonic()
        if view.done != progress:
            progress, progressed = view.done, now
        if view.done >= view.total:
            run.caught_up_s = now - last
            run.cpu_caught_up_s = procs.tree_usage(worker.pid, memory=False).cpu - cpu_first
            if view.status != "finished":
                raise RuntimeError(f"task ended {view.status}: {view.counts}")
            if run.callback:
                run.callback_s = _callback_ran(marker, run.jobs, worker) - now
            return
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.returncode}; SQL at {view.counts}")
        if now - progressed > STALL_TIMEOUT:
            raise RuntimeError(f"SQL made no progress for {STALL_TIMEOUT:.0f} s: {view.counts}")
        time.sleep(SQL_POLL)


def _callback_ran(marker: Path, jobs: int, worker: Any) -> float:
    """When the task's callback wrote its marker byte (monotonic)."""
    deadline = time.monotonic() + STALL_TIMEOUT
    while marker.stat().st_size <= jobs:
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the task's callback did not run")
        time.sleep(SQL_POLL)
    return time.monotonic()


def _checks(
    server: RedisServer, marker: Path, tracking: Tracking | None, task_id: str | None
) -> dict[str, Any]:
    """After the worker stopped: each job ran once, nothing left queued or in flight."""
    with server.client() as conn:
        checks: dict[str, Any] = {
            "marker_bytes": marker.stat().st_size,
            "queued_left": asynctask_queued(conn),
            "inflight_left": sum(int(conn.llen(k)) for k in conn.scan_iter(match="asynctask:inflight|*")),
            "stat_processed": int(conn.get("stat:processed") or 0),
        }
        if tracking is not None and task_id is not None:
            view = tracking.get_task(task_id)
            checks.update(
                sql_status=view.status,
                sql_finish=view.counts["finish"],
                sql_counts=view.counts,
                stream_left=int(conn.xlen(STREAM)),
            )
    return checks
