"""SSE fan-out: many clients stream one task's progress (``GET /api/tasks/<id>/stream``).

Order of work:

1. PostgreSQL: a database of its own (created here, dropped after), an API token of the
   bench tenant, the private Redis emptied; the API server started on them the way the api
   section starts it (``python -m asynctask api``, see ``bench/api/server.py``) but with
   ``--threads clients + 10``: gunicorn's gthread worker gives each open stream a thread for
   as long as it lasts, and the kernel may hand any share of the connections to either of the
   two workers, so each worker gets enough threads to hold every stream by itself;
2. ``create_task`` of J no-op jobs (chunk_size 1, the bench tenant), no worker running;
3. C clients in one separate asyncio process (``bench/sse/client.py``: raw HTTP/1.1,
   chunked decoding, SSE parsing; its own process so that it shares no GIL with the server
   or the bench) open their streams at once; the bench waits until all of them got the
   first snapshot;
4. one AsyncTask worker (``-c 10``, tracking on, its flusher writing PostgreSQL) is started
   and runs the jobs; every client records when each event arrives, up to its ``end``.

Times are ``CLOCK_MONOTONIC`` (``time.monotonic()``), shared by every process of the
machine. The task's completion in SQL is observed without adding load while jobs run: the
bench polls the worker's marker file (one ``stat`` every 2 ms) until the last job is done,
and only then polls ``get_task`` every 5 ms until it reports the task finished.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from asynctask import Client, Settings, Tracking
from asynctask.db.engine import create_database_engine
from asynctask.tokens import create_token
from bench.api.section import MIB, TENANT
from bench.api.server import WORKERS, ApiServer, RssSampler
from bench.core import procs
from bench.core.fmt import percentile
from bench.core.machine import package_version
from bench.core.postgres import postgres_unreachable
from bench.core.redis_server import RedisServer
from bench.core.system import ROOT, asynctask_queued, clean_env
from bench.core.timing import STOP_GRACE, poll_marker
from bench.core.tracked_jobs import tracked_noop_job
from bench.sse.client import TOKEN_ENV
from bench.tracking import drain as tracking_drain
from bench.tracking.db import PostgresDatabase
from webapi.config import ApiConfig

CLIENTS = 100
JOBS = 2000
QUICK_CLIENTS = 10
QUICK_JOBS = 200
#: Job slots of the one worker process, as in the other sections.
CONCURRENCY = 10
#: Threads per API worker beyond one per stream and the quarter of its threads the server keeps
#: free of streams: the readiness probe, a stray request.
SPARE_THREADS = 10
#: Seconds for every client to get its first snapshot.
CONNECT_TIMEOUT = 60.0
#: Seconds for the jobs to run and every client to get ``end``, at least.
MIN_RUN_TIMEOUT = 120.0
SQL_POLL = 0.005


@dataclass
class SseResults:
    settings: dict[str, Any]
    clients: int
    jobs: int
    concurrency: int = CONCURRENCY
    api_workers: int = WORKERS
    api_threads: int = 0
    #: Seconds between the API's reads of a watched task (``stream_interval``), per worker.
    stream_interval_s: float = 0.0
    database: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    #: Clients that got their first snapshot, and that got ``end``.
    connected: int = 0
    ended: int = 0
    #: First connect attempt -> the last client's first snapshot.
    connect_all_s: float = 0.0
    #: Per client: connect attempt -> first snapshot, ms.
    first_snapshot_ms: list[float] = field(default_factory=list)
    #: Per client: ``progress`` events after the first snapshot (the worker running).
    progress_events: list[int] = field(default_factory=list)
    #: Worker spawn -> first job done, first job done -> last job done (marker file).
    startup_s: float = 0.0
    drain_s: float = 0.0
    #: Last job done -> the first get_task that reports the task finished.
    sql_caught_up_s: float = 0.0
    #: Per client: that get_task -> the client's ``end`` event, and last job done -> ``end``, ms.
    end_lag_ms: list[float] = field(default_factory=list)
    end_after_last_job_ms: list[float] = field(default_factory=list)
    #: First client's ``end`` -> last client's ``end``, ms: over all clients, and the most of
    #: any one API worker (each worker's reader wakes its own streams on its own clock).
    end_spread_ms: float = 0.0
    end_spread_worker_ms: float = 0.0
    #: Per client: the pid of the API worker holding its connection (0: not found).
    api_worker: list[int] = field(default_factory=list)
    #: Per client, each event's arrival: [seconds after the worker spawn, kind].
    timelines: list[list[tuple[float, str]]] = field(default_factory=list)
    #: API server (arbiter + workers) CPU seconds: while the clients connected, and from the
    #: worker spawn to the clients' process exit (every ``end`` received).
    server_cpu_connect_s: float = 0.0
    server_cpu_s: float = 0.0
    #: Summed RSS of the API server's processes before the clients connected, and the sum of
    #: each process's peak (sampled every 5 ms) until the clients' process exited, MiB.
    server_rss_before_mib: float = 0.0
    server_rss_peak_mib: float = 0.0
    #: CPU seconds of the clients' process (all of it) and of the worker's tree during the run.
    clients_cpu_s: float = 0.0
    worker_cpu_s: float = 0.0
    checks: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""


def sizes(quick: bool) -> tuple[int, int]:
    """(clients, jobs) of a full or quick run."""
    return (QUICK_CLIENTS, QUICK_JOBS) if quick else (CLIENTS, JOBS)


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> SseResults:
    """One fan-out run; ``settings``: ``clients`` and ``jobs`` (else ``sizes(settings["quick"])``).

    Never raises for a failed run: ``error`` says what went wrong.
    """
    default_clients, default_jobs = sizes(bool(settings.get("quick")))
    clients = int(settings.get("clients") or default_clients)
    jobs = int(settings.get("jobs") or default_jobs)
    results = SseResults(settings, clients, jobs, api_threads=clients + clients // 3 + SPARE_THREADS)
    results.stream_interval_s = ApiConfig().stream_interval
    results.versions = {name: package_version(name) for name in ("gunicorn", "Flask")}
    started = time.monotonic()
    unreachable = postgres_unreachable(pg_url)
    if unreachable is not None:
        results.error = f"PostgreSQL not reachable: {unreachable}"
        return results
    try:
        with ExitStack() as stack:
            pg = stack.enter_context(PostgresDatabase(pg_url))
            results.database = "PostgreSQL, a database created for this run and dropped after"
            url = pg.fresh()
            results.versions["PostgreSQL server"] = pg.version()
            engine = create_database_engine(url)
            stack.callback(engine.dispose)
            token = create_token(engine, TENANT, "bench sse").token
            with server.client() as conn:
                conn.flushall()
            client = Client(Settings(redis_url=server.url))
            stack.callback(client.close)
            tracking = Tracking(client, engine)
            task_id = tracking.create_task(tracked_noop_job, range(jobs), chunk_size=1, tenant=TENANT).id
            queued = asynctask_queued(client.redis)
            if queued != jobs:
                raise RuntimeError(f"create_task of {jobs} jobs left {queued} in the queue")
            # Every client streams as the one bench tenant, possibly all through one worker.
            caps = {
                "ASYNCTASK_API_MAX_STREAMS": str(clients),
                "ASYNCTASK_API_MAX_TENANT_STREAMS": str(clients),
            }
            api = stack.enter_context(
                ApiServer("postgresql", url, server.url, workdir, threads=results.api_threads, env=caps)
            )
            _fan_out(results, api, token, task_id, tracking, server, url, workdir)
    except Exception as exc:
        results.error = f"{type(exc).__name__}: {exc}"
    results.seconds = time.monotonic() - started
    _say(results)
    return results


def _fan_out(
    results: SseResults,
    api: ApiServer,
    token: str,
    task_id: str,
    tracking: Tracking,
    server: RedisServer,
    database_url: str,
    workdir: Path,
) -> None:
    ready, out = workdir / "sse-ready.json", workdir / "sse-clients.json"
    timeout = max(MIN_RUN_TIMEOUT, results.jobs / 20)
    argv = [
        sys.executable, "-m", "bench.sse.client", "--port", str(api.port),
        "--path", f"/api/tasks/{task_id}/stream", "--clients", str(results.clients),
        "--ready", str(ready), "--out", str(out),
        "--connect-timeout", str(CONNECT_TIMEOUT), "--timeout", str(CONNECT_TIMEOUT + timeout),
    ]  # fmt: skip
    sampler = RssSampler([api.pid, *api.worker_pids()])
    results.server_rss_before_mib = sum(sampler.base.values()) / MIB
    cpu_start = api.cpu()
    sampler.start()
    env = clean_env(PYTHONPATH=str(ROOT), **{TOKEN_ENV: token})
    viewers = procs.spawn(argv, env=env, cwd=ROOT, log=workdir / "sse-clients.log")
    try:
        connected = _wait_file(ready, viewers, CONNECT_TIMEOUT + 30, workdir / "sse-clients.log")
        results.connected = int(connected["connected"])
        if results.connected < results.clients:
            raise RuntimeError(
                f"{results.connected} of {results.clients} clients got their first snapshot: "
                f"{connected['errors'][:3]}"
            )
        cpu_connected = api.cpu()
        owners = _owners(api)
        results.server_cpu_connect_s = cpu_connected - cpu_start
        marker = workdir / "marker-sse"
        marker.write_bytes(b"")
        worker_env = clean_env(
            ASYNCTASK_REDIS_URL=server.url,
            ASYNCTASK_DATABASE_URL=database_url,
            ASYNCTASK_TRACKING="true",
            PYTHONPATH=str(ROOT),
            BENCH_MARKER=str(marker),
        )
        log = workdir / "worker-sse.log"
        spawned = time.monotonic()
        worker = procs.spawn(tracking_drain.worker_argv(CONCURRENCY), env=worker_env, cwd=ROOT, log=log)
        try:
            last_job = _drain(results, worker, marker, spawned, timeout, log)
            sql_done = _caught_up(tracking, task_id, last_job, timeout)
            results.sql_caught_up_s = sql_done - last_job
            try:
                viewers.wait(timeout)
            except subprocess.TimeoutExpired as exc:
                raise RuntimeError(f"the clients did not all get `end` within {timeout:.0f} s") from exc
            results.server_cpu_s = api.cpu() - cpu_connected
            results.worker_cpu_s = procs.tree_usage(worker.pid, memory=False).cpu
        finally:
            procs.stop(worker, grace=STOP_GRACE)
        results.checks = {
            "marker_bytes": marker.stat().st_size,
            "sql_status": tracking.get_task(task_id).status,
        }
        _read_clients(results, json.loads(out.read_text()), owners, spawned, last_job, sql_done)
    finally:
        sampler.stop()
        results.server_rss_peak_mib = sum(sampler.peak.values()) / MIB
        procs.stop(viewers, grace=5)


def _wait_file(path: Path, proc: Any, timeout: float, log: Path) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the clients' process exited with {proc.returncode}: {procs.log_line(log)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the clients did not connect within {timeout:.0f} s")
        time.sleep(0.01)
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def _drain(
    results: SseResults, worker: Any, marker: Path, spawned: float, timeout: float, log: Path
) -> float:
    """Wait for the last job's marker byte; return when it was seen."""
    for poll in poll_marker(marker, results.jobs):
        if poll.last:
            break
        if worker.poll() is not None:
            raise RuntimeError(
                f"worker exited with {worker.returncode} after {poll.done} jobs: {procs.log_line(log)}"
            )
        if poll.now - spawned > timeout:
            raise RuntimeError(f"{poll.done} of {results.jobs} jobs done after {timeout:.0f} s")
    results.startup_s, results.drain_s = poll.first - spawned, poll.now - poll.first
    return poll.now


def _caught_up(tracking: Tracking, task_id: str, last_job: float, timeout: float) -> float:
    """The first get_task after the last job that reports the task finished."""
    while True:
        view = tracking.get_task(task_id)
        now = time.monotonic()
        if view.status == "finished":
            return now
        if now - last_job > timeout:
            raise RuntimeError(
                f"SQL still says {view.status} {view.counts} {timeout:.0f} s after the last job"
            )
        time.sleep(SQL_POLL)


def _owners(api: ApiServer) -> dict[int, int]:
    """Client port -> pid of the API worker holding that connection (read once, before the run)."""
    found: dict[int, int] = {}
    for pid in api.worker_pids():
        try:
            connections = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.Error:
            continue
        for c in connections:
            if c.raddr and c.laddr.port == api.port and c.status == psutil.CONN_ESTABLISHED:
                found[c.raddr.port] = pid
    return found


def _read_clients(
    results: SseResults,
    data: dict[str, Any],
    owners: dict[int, int],
    spawned: float,
    last_job: float,
    sql_done: float,
) -> None:
    results.clients_cpu_s = float(data["cpu_s"])
    results.connect_all_s = float(data["connect_all_s"])
    ends: list[float] = []
    by_worker: dict[int, list[float]] = {}
    for stream in data["streams"]:
        results.api_worker.append(owners.get(stream["port"], 0))
        events: list[tuple[float, str]] = [(t, kind) for t, kind in stream["events"]]
        results.timelines.append([(round(t - spawned, 6), kind) for t, kind in events])
        if stream["first_at"]:
            results.first_snapshot_ms.append((stream["first_at"] - stream["started_at"]) * 1000)
        results.progress_events.append(sum(1 for t, kind in events if kind == "progress" and t > spawned))
        end = next((t for t, kind in events if kind == "end"), None)
        if end is not None:
            ends.append(end)
            by_worker.setdefault(results.api_worker[-1], []).append(end)
            results.end_lag_ms.append((end - sql_done) * 1000)
            results.end_after_last_job_ms.append((end - last_job) * 1000)
    results.ended = len(ends)
    results.end_spread_ms = (max(ends) - min(ends)) * 1000 if ends else 0.0
    results.end_spread_worker_ms = max(((max(e) - min(e)) * 1000 for e in by_worker.values()), default=0.0)
    errors = [stream["error"] for stream in data["streams"] if stream["error"]]
    if results.ended != results.clients:
        results.error = f"{results.ended} of {results.clients} clients got `end`; errors: {errors[:3]}"
    elif results.checks["marker_bytes"] != results.jobs or results.checks["sql_status"] != "finished":
        results.error = f"after the run: {results.checks}, expected {results.jobs} jobs run and finished"


def _say(results: SseResults) -> None:
    if results.error:
        print(f"sse {results.clients} clients: FAILED: {results.error}", file=sys.stderr)
        return
    print(
        f"sse {results.clients} clients, {results.jobs} jobs: {results.ended} got end, "
        f"lag from SQL p50 {percentile(results.end_lag_ms, 50):.0f} ms, "
        f"max {max(results.end_lag_ms):.0f} ms, "
        f"server CPU {results.server_cpu_s:.2f} s",
        file=sys.stderr,
    )
