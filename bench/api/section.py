"""The api section: ``GET /api/tasks/<id>`` under concurrent load, and POSTs of many items.

Order of work:

1. PostgreSQL: a database of its own with one task of E events (``bench/tracking/data.py``:
   failed and error events among them, so every GET also reads the first errors and their
   messages) and an API token of the task's tenant; the API server
   (``python -m asynctask api --workers 2 --threads 8``) started on it twice: with the
   default settings (errors cache 1 s) and with ``ASYNCTASK_API_ERRORS_CACHE_SECONDS=0``
   (errors cache off), see ``VARIANTS``;
2. load: one discarded warm-up run per server, then for each repetition, for each connection
   count, ``wrk -t1 -cC -dD --latency`` on ``GET /api/tasks/<id>`` against each server in
   turn (one server under load at a time, the other idle); the cache-off server is then stopped;
3. SQLite: a new file (tables created, a token), a second API server on it;
4. POSTs: for each repetition, on PostgreSQL then SQLite, a JSON body then a CSV body of M
   items (chunk_size 1: M jobs) sent with ``http.client``, into empty tracking tables and
   an empty Redis (no worker consumes the job's queue).

Without a reachable PostgreSQL (``--pg-url``) the load part and the PostgreSQL POSTs are
skipped and the report says so; SQLite always runs. wrk is required (checked up front).
"""

from __future__ import annotations

import csv
import http.client
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import Engine, text

from asynctask.db.engine import create_database_engine, writer
from asynctask.tokens import create_token
from bench.api.jobs import NAME, QUEUE, item
from bench.api.server import CACHED, UNCACHED, VARIANTS, ApiServer, RssSampler
from bench.core.machine import package_version
from bench.core.postgres import postgres_unreachable, shown
from bench.core.redis_server import RedisServer
from bench.core.system import asynctask_queued
from bench.tracking import data as tracking_data
from bench.tracking.db import TABLES, PostgresDatabase, SqliteFiles

#: The tenant of tracking_data's tasks: the token must be of the same tenant, or GET is a 404.
TENANT = "bench"
#: Seconds of the discarded warm-up run (fills both workers' pools, prepares statements).
WARMUP_S = 2
#: wrk's request timeout: a slower answer counts as an error, not as a latency.
WRK_TIMEOUT_S = 10
MIB = 2**20

#: Prints one line of JSON at the end of a wrk run: exact µs values of the latency histogram
#: (wrk's own text rounds to two decimals) plus the counters of its summary.
_LUA = """\
wrk.headers["Authorization"] = "Bearer {token}"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH_WRK {{\\"requests\\": %d, \\"duration_us\\": %d, \\"bytes\\": %d, "
    .. "\\"p50_us\\": %d, \\"p75_us\\": %d, \\"p90_us\\": %d, \\"p99_us\\": %d, \\"p999_us\\": %d, "
    .. "\\"max_us\\": %d, \\"mean_us\\": %.1f, \\"stdev_us\\": %.1f, "
    .. "\\"connect\\": %d, \\"read\\": %d, \\"write\\": %d, \\"timeout\\": %d, \\"non_2xx\\": %d}}\\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9), latency.max, latency.mean, latency.stdev,
    e.connect, e.read, e.write, e.timeout, e.status))
end
"""


@dataclass
class LoadRun:
    """One wrk run on ``GET /api/tasks/<id>``."""

    rep: int
    #: Which server: a key of ``VARIANTS``.
    variant: str
    connections: int
    duration_s: int
    requests: int = 0
    elapsed_s: float = 0.0
    p50_ms: float = 0.0
    p75_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    p999_ms: float = 0.0
    max_ms: float = 0.0
    mean_ms: float = 0.0
    stdev_ms: float = 0.0
    bytes_read: int = 0
    #: Responses other than 2xx/3xx, and socket errors (connect, read, write, timeout).
    non_2xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)
    #: CPU seconds during the run: the API server (arbiter + workers), the PostgreSQL
    #: backends of the bench's database, and wrk itself. All share the machine's cores.
    server_cpu_s: float = 0.0
    postgres_cpu_s: float = 0.0
    wrk_cpu_s: float = 0.0
    #: 1-minute load average just before the run (other work on the machine shows here).
    load_before: float = 0.0
    output: str = field(default="", repr=False)
    error: str = ""

    @property
    def rate(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def per_request_ms(self, cpu_s: float) -> float:
        return cpu_s / self.requests * 1000 if self.requests else 0.0


@dataclass
class PostRun:
    """One ``POST /api/tasks`` of ``items`` items."""

    rep: int
    database: str
    format: str
    items: int
    body_bytes: int
    #: First byte of the request sent -> whole 202 response read.
    seconds: float = 0.0
    status: int = 0
    #: Jobs the response reports and jobs found in the queue afterwards (both = items).
    jobs: int = 0
    queued: int = 0
    #: Peak RSS of the API workers during the request minus their RSS before it (the most
    #: of any worker), and their RSS before it, MiB.
    rss_growth_mib: float = 0.0
    rss_before_mib: float = 0.0
    server_cpu_s: float = 0.0
    response: str = field(default="", repr=False)
    error: str = ""

    @property
    def rate(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ApiResults:
    settings: dict[str, Any]
    #: Database kind -> where it ran, or why it was skipped.
    databases: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    big_task: tracking_data.BigTask | None = None
    #: Size of one GET response body (the task with its first errors).
    response_bytes: int = 0
    loads: list[LoadRun] = field(default_factory=list)
    posts: list[PostRun] = field(default_factory=list)
    #: Wall time of each part of the section, seconds.
    seconds: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        loads = [f"api load {r.variant} c={r.connections}: {r.error}" for r in self.loads if r.error]
        posts = [f"api POST {r.format} on {r.database}: {r.error}" for r in self.posts if r.error]
        return loads + posts + self.failures


def wrk_missing() -> str | None:
    """Why the section cannot run, or None."""
    if shutil.which("wrk") is None:
        return (
            "the api section needs wrk (HTTP load generator): install the Debian package `wrk` "
            "(apt-get install wrk), or leave the section out with --sections runtime,tracking"
        )
    return None


class PostgresBackends:
    """CPU time of the PostgreSQL backends connected to one database (the API's pool)."""

    def __init__(self, url: str) -> None:
        self.engine = create_database_engine(url)

    def cpu(self) -> dict[int, float]:
        query = (
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        with self.engine.connect() as connection:
            pids = [int(pid) for pid in connection.exec_driver_sql(query).scalars()]
        found: dict[int, float] = {}
        for pid in pids:
            try:
                times = psutil.Process(pid).cpu_times()
            except psutil.Error:
                continue
            found[pid] = times.user + times.system
        return found

    def close(self) -> None:
        self.engine.dispose()


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> ApiResults:
    """Run the section; ``pg_url`` is the admin connection (``settings`` shows it password-less)."""
    results = ApiResults(settings)
    settings["variants"] = {name: env for name, env in VARIANTS.items()}
    started = time.monotonic()
    unreachable = postgres_unreachable(pg_url)
    results.versions = _versions()
    try:
        with ExitStack() as stack:
            servers: list[tuple[ApiServer, str, Any]] = []
            if unreachable is None:
                pg = stack.enter_context(PostgresDatabase(pg_url))
                results.databases["postgresql"] = f"{shown(pg.url)} (created for this run, dropped after)"
                results.versions["PostgreSQL server"] = pg.version()
                url = pg.fresh()
                mark = time.monotonic()
                results.big_task = big = tracking_data.build(url, settings["events"])
                _say(f"api: built a task of {big.events:,} events", "", f"{big.build_s:.1f} s")
                token = _token(url)
                api = stack.enter_context(ApiServer("postgresql", url, server.url, workdir))
                results.seconds["build"] = time.monotonic() - mark
                mark = time.monotonic()
                _load(results, api, url, token, big.task_id, server.url, workdir)
                results.seconds["load"] = time.monotonic() - mark
                servers.append((api, token, pg))
            else:
                results.databases["postgresql"] = f"skipped: {unreachable}"
                print(f"PostgreSQL not reachable ({unreachable}): api POSTs on SQLite only", file=sys.stderr)
            sqlite = SqliteFiles(workdir)
            url = sqlite.fresh()
            results.databases["sqlite"] = "a new file in the bench's temporary directory"
            results.versions["SQLite library"] = sqlite.version()
            api = stack.enter_context(ApiServer("sqlite", url, server.url, workdir))
            servers.append((api, _token(url), url))
            mark = time.monotonic()
            _posts(results, servers, server)
            results.seconds["post"] = time.monotonic() - mark
    except Exception as exc:
        # Reported as a failure of the section; the rest of the bench still writes its report.
        results.failures.append(f"api: {type(exc).__name__}: {exc}")
        print(f"api section FAILED: {exc}", file=sys.stderr)
    results.seconds["total"] = time.monotonic() - started
    return results


def _token(url: str) -> str:
    engine = create_database_engine(url)
    try:
        return create_token(engine, TENANT, "bench").token
    finally:
        engine.dispose()


def _load(
    results: ApiResults, api: ApiServer, url: str, token: str, task_id: str, redis_url: str, workdir: Path
) -> None:
    """wrk on the default server ``api`` and on a second one with the errors cache off."""
    s = results.settings
    script = workdir / "api-get.lua"
    script.write_text(_LUA.format(token=token), encoding="utf-8")
    path = f"/api/tasks/{task_id}"
    backends = PostgresBackends(url)
    try:
        with ApiServer(api.kind, url, redis_url, workdir, UNCACHED) as uncached:
            servers = {CACHED: api, UNCACHED: uncached}
            for variant, target in servers.items():
                status, body = target.request("GET", path, headers={"Authorization": f"Bearer {token}"})
                if status != 200 or not json.loads(body).get("errors"):
                    raise RuntimeError(
                        f"GET {path} ({variant}): {status} {body[:300]!r} (expected 200 with errors)"
                    )
                results.response_bytes = len(body)
                # Each server's own warm-up (pools filled, statements prepared), discarded.
                _wrk(target, backends, script, path, max(s["connections"]), s["warmup_s"], -1)
            for rep in range(s["reps"]):
                for connections in s["connections"]:
                    for variant, target in servers.items():
                        done = _wrk(target, backends, script, path, connections, s["duration_s"], rep)
                        results.loads.append(done)
                        _say(f"api rep {rep + 1} GET {variant} c={connections}", done.error, (
                            f"{done.rate:,.0f} req/s, p50 {done.p50_ms:.2f} ms, "
                            f"p90 {done.p90_ms:.2f} ms, p99 {done.p99_ms:.2f} ms"
                        ))  # fmt: skip
    finally:
        backends.close()


def _wrk(
    api: ApiServer,
    backends: PostgresBackends,
    script: Path,
    path: str,
    connections: int,
    seconds: int,
    rep: int,
) -> LoadRun:
    """One wrk run on ``api``. ``backends`` are all of the database's: the other server is idle."""
    run = LoadRun(rep, api.variant, connections, seconds, load_before=os.getloadavg()[0])
    argv = [
        "wrk", "-t1", f"-c{connections}", f"-d{seconds}s", f"--timeout={WRK_TIMEOUT_S}s",
        "--latency", "-s", str(script), f"http://127.0.0.1:{api.port}{path}",
    ]  # fmt: skip
    server_cpu, pg_cpu = api.cpu(), backends.cpu()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    run.server_cpu_s = api.cpu() - server_cpu
    pg_after = backends.cpu()
    run.postgres_cpu_s = sum(cpu - pg_cpu.get(pid, 0.0) for pid, cpu in pg_after.items())
    run.wrk_cpu_s = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    run.output = out.stdout + out.stderr
    line = next((x for x in out.stdout.splitlines() if x.startswith("BENCH_WRK ")), None)
    if out.returncode != 0 or line is None:
        run.error = f"wrk exited with {out.returncode}: {' '.join(run.output.split())[-300:]}"
        return run
    data = json.loads(line.removeprefix("BENCH_WRK "))
    run.requests, run.elapsed_s, run.bytes_read = data["requests"], data["duration_us"] / 1e6, data["bytes"]
    for name in ("p50", "p75", "p90", "p99", "p999", "max"):
        setattr(run, f"{name}_ms", data[f"{name}_us"] / 1000)
    run.mean_ms, run.stdev_ms = data["mean_us"] / 1000, data["stdev_us"] / 1000
    run.non_2xx = data["non_2xx"]
    run.socket_errors = {k: data[k] for k in ("connect", "read", "write", "timeout")}
    if run.non_2xx or any(run.socket_errors.values()):
        run.error = f"{run.non_2xx} non-2xx responses, socket errors {run.socket_errors}"
    elif not run.requests:
        run.error = "no request completed"
    return run


def bodies(items: int) -> dict[str, tuple[str, str, bytes]]:
    """Format -> (path, content type, body) of a POST of ``items`` items."""
    rows = [item(i) for i in range(items)]
    as_json = json.dumps({"job": NAME, "items": rows, "chunk_size": 1}).encode()
    buffer = io.StringIO()
    writer_ = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer_.writeheader()
    writer_.writerows(rows)
    as_csv = buffer.getvalue().encode()
    return {
        "json": ("/api/tasks", "application/json", as_json),
        "csv": (f"/api/tasks?job={NAME}&chunk_size=1", "text/csv", as_csv),
    }


def _posts(results: ApiResults, servers: list[tuple[ApiServer, str, Any]], redis_server: RedisServer) -> None:
    s = results.settings
    payloads = bodies(s["items"])
    for rep in range(s["post_reps"]):
        for api, token, database in servers:
            for fmt, (path, content_type, body) in payloads.items():
                _empty(database, redis_server)
                done = _post(api, token, path, content_type, body, rep, fmt, s["items"], redis_server)
                results.posts.append(done)
                _say(f"api rep {rep + 1} POST {s['items']:,} items {fmt} on {api.kind}", done.error, (
                    f"{done.seconds:.2f} s ({done.rate:,.0f} items/s), "
                    f"worker RSS +{done.rss_growth_mib:.1f} MiB"
                ))  # fmt: skip
    for _, _, database in servers:
        _empty(database, redis_server)


def _empty(database: PostgresDatabase | str, redis_server: RedisServer) -> None:
    """Empty Redis (private to the bench) and the tracking tables (the token table stays)."""
    with redis_server.client() as conn:
        conn.flushall()
    if isinstance(database, PostgresDatabase):
        database.fresh()
        return
    engine: Engine = create_database_engine(database)
    try:
        with writer(engine).begin() as connection:
            for table in TABLES.split(", "):
                connection.execute(text(f"DELETE FROM {table}"))
    finally:
        engine.dispose()


def _post(
    api: ApiServer,
    token: str,
    path: str,
    content_type: str,
    body: bytes,
    rep: int,
    fmt: str,
    items: int,
    redis_server: RedisServer,
) -> PostRun:
    run = PostRun(rep, api.kind, fmt, items, len(body))
    headers = {"Authorization": f"Bearer {token}", "Content-Type": content_type}
    sampler = RssSampler(api.worker_pids())
    cpu = api.cpu()
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=300)
    try:
        conn.connect()
        sampler.start()
        start = time.perf_counter()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        run.seconds = time.perf_counter() - start
    except OSError as exc:
        run.error = f"{type(exc).__name__}: {exc}"
        return run
    finally:
        sampler.stop()
        conn.close()
    run.server_cpu_s = api.cpu() - cpu
    run.rss_growth_mib, run.rss_before_mib = sampler.growth / MIB, sampler.before / MIB
    run.status, run.response = response.status, answer.decode(errors="replace")[:500]
    if run.status != 202:
        run.error = f"HTTP {run.status}: {run.response[:300]}"
        return run
    run.jobs = int(json.loads(answer)["jobs"])
    with redis_server.client() as conn_redis:
        run.queued = asynctask_queued(conn_redis, QUEUE)
    if run.jobs != items or run.queued != items:
        run.error = f"{items} items sent: the response says {run.jobs} jobs, {run.queued} in the queue"
    return run


def _versions() -> dict[str, str]:
    versions = {
        name: package_version(name) for name in ("gunicorn", "Flask", "Werkzeug", "SQLAlchemy", "psycopg")
    }
    versions["wrk"] = wrk_version()
    return versions


def wrk_version() -> str:
    try:
        out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "not installed"
    first = (out.stdout + out.stderr).strip().splitlines()
    # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer"
    return first[0].split(" Copyright")[0].removeprefix("wrk ").strip() if first else "unknown"


def _say(label: str, error: str, detail: str) -> None:
    print(f"{label}: {'FAILED: ' + error if error else detail}", file=sys.stderr)
