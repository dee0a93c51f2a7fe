"""The job systems of the sql section and exactly how each is run.

AsyncTask's SQL broker on SQLite and on PostgreSQL (from the project's venv; untracked jobs,
and optionally one tracked task's jobs), Huey's ``SqliteHuey`` (SQLite; with its defaults,
and with AsyncTask's durability setting) and procrastinate (PostgreSQL), both from the peers'
venv (``bench/core/peers_venv.py``). Every system's job is a no-op that appends one byte to the
``BENCH_MARKER`` file; every worker process gets the same number of concurrent job slots,
threads or (procrastinate) asyncio tasks.
"""

from __future__ import annotations

import subprocess
import sys
from abc import ABC, abstractmethod
from pathlib import Path

from bench.core import peers_venv
from bench.core.system import ROOT, clean_env, marker_env

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
#: Jobs per bulk enqueue call, where the system has one.
BATCH = 1000


class SqlSystem(ABC):
    """One system on one backend.

    ``setup(url)`` makes an empty database at ``url`` ready (tables), once per database (on
    SQLite once per system: each run gets a copy);
    ``enqueue_argv(url, jobs)`` prints ``{"jobs", "seconds"}``; ``worker_argv(url, c)``
    starts one worker process with ``c`` job slots; ``env(url, marker)`` is the environment
    of both; ``pending_sql`` counts the jobs not done yet (N after the enqueue, 0 after the
    drain); ``done_sql``, if set, is what the system itself records as done (N after the drain).
    """

    name: str
    backend: str
    pending_sql: str
    done_sql = ""
    #: Whether it runs from the peers' venv.
    peer = False

    @abstractmethod
    def setup(self, url: str) -> None: ...

    @abstractmethod
    def enqueue_argv(self, url: str, jobs: int) -> list[str]: ...

    @abstractmethod
    def worker_argv(self, url: str, concurrency: int) -> list[str]: ...

    @abstractmethod
    def env(self, url: str, marker: Path | None) -> dict[str, str]: ...

    @abstractmethod
    def describe(self) -> list[str]:
        """Human-readable configuration, written to RESULTS.md."""


def _run(argv: list[str], env: dict[str, str], what: str) -> None:
    out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed ({out.returncode}): {out.stderr.strip()[-600:]}")


# --- AsyncTask -------------------------------------------------------------------------------


class _AsyncTask(SqlSystem):
    """AsyncTask's no-op throughput: untracked jobs with tracking off (the queue's own cost),
    or, ``tracked``, one task's jobs with tracking on (each job's state change and its
    tracking write in one transaction)."""

    pending_sql = "SELECT count(*) FROM asynctask_job"

    def __init__(self, backend: str, tracked: bool) -> None:
        self.backend, self.tracked = backend, tracked
        self.name = "AsyncTask, tracked task" if tracked else "AsyncTask"
        self.done_sql = "SELECT count_finish FROM asynctask_task" if tracked else ""
        self.mode, self.module = (
            ("task", "bench/core/tracked_jobs.py") if tracked else ("bulk", "bench/core/noop_jobs.py")
        )
        self.tracking = "true" if tracked else "false"

    def setup(self, url: str) -> None:
        argv = [sys.executable, "-m", "asynctask", "db", "upgrade", "--database-url", url]
        _run(argv, clean_env(), "asynctask db upgrade")

    def enqueue_argv(self, url: str, jobs: int) -> list[str]:
        return [sys.executable, "-m", "bench.core.enqueue", url, self.mode, str(jobs), str(BATCH)]

    def worker_argv(self, url: str, concurrency: int) -> list[str]:
        # What a user types: the CLI, the broker URL, the job module by path, one queue.
        return [
            sys.executable, "-m", "asynctask", "worker", "--broker", url,
            "-r", self.module, "-c", str(concurrency), "-q", "default",
        ]  # fmt: skip

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        return clean_env(PYTHONPATH=str(ROOT), ASYNCTASK_TRACKING=self.tracking, **marker_env(marker))

    def describe(self) -> list[str]:
        database = (
            "a new file per run, a copy of one migrated once"
            if self.backend == SQLITE
            else "a private database, TRUNCATEd before each run"
        )
        if self.tracked:
            enqueue = (
                "enqueue: one task, `Tracking(client).create_task(TrackedNoopJob, range(N), chunk_size=1)` "
                "(N jobs, each given its one-item chunk) from `python -m bench.core.enqueue URL task N 1000`"
            )
        else:
            enqueue = (
                f"enqueue: `NoopJob.perform_bulk(args, batch_size={BATCH})` from `python -m "
                "bench.core.enqueue URL bulk N 1000` (`Settings(broker_url=URL, tracking=False)`)"
            )
        return [
            f"database: `asynctask db upgrade --database-url URL` (Alembic, every revision) on {database}",
            enqueue,
            "worker, per process: `python -m asynctask worker --broker URL "
            f"-r {self.module} -c C -q default`, "
            f"`ASYNCTASK_TRACKING={self.tracking}`, every other setting at its default",
        ]


# --- Huey (SQLite) ---------------------------------------------------------------------------


class _Huey(SqlSystem):
    """Huey with its defaults (synchronous FULL), or ``normal``: synchronous NORMAL, as AsyncTask."""

    backend = SQLITE
    pending_sql = "SELECT count(*) FROM task"
    peer = True

    def __init__(self, normal: bool) -> None:
        self.normal = normal
        self.name = "Huey, synchronous NORMAL" if normal else "Huey"

    def setup(self, url: str) -> None:
        # SqliteHuey creates its tables when it is made, that is when huey_app is imported.
        _run([str(peers_venv.python()), "-c", "import huey_app"], self.env(url, None), "huey_app import")

    def enqueue_argv(self, url: str, jobs: int) -> list[str]:
        return [str(peers_venv.python()), str(peers_venv.PEERS_DIR / "huey_enqueue.py"), str(jobs)]

    def worker_argv(self, url: str, concurrency: int) -> list[str]:
        # -q: WARNING level; Huey logs two INFO lines per task otherwise, AsyncTask none.
        return [
            str(peers_venv.bin_path("huey_consumer")), "huey_app.huey",
            "-w", str(concurrency), "-k", "thread", "-q",
        ]  # fmt: skip

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        extra = {"BENCH_HUEY_SYNCHRONOUS": "NORMAL"} if self.normal else {}
        return peers_venv.env(BENCH_SQLITE=url.removeprefix("sqlite:///"), **extra, **marker_env(marker))

    def describe(self) -> list[str]:
        if self.normal:
            storage = (
                '`SqliteHuey("bench", filename=FILE, storage_class=NormalSyncStorage)`: Huey\'s '
                "`SqliteStorage` whose connections also run `PRAGMA synchronous=NORMAL`, the setting "
                "AsyncTask's connections have (WAL: no fsync per commit; Huey's `fsync` option offers "
                "only FULL or OFF); otherwise as the default row"
            )
        else:
            storage = (
                '`SqliteHuey("bench", filename=FILE)` with its defaults: journal_mode WAL, synchronous '
                "left at SQLite's default (FULL here: an fsync per commit), 5 s busy timeout, results "
                "stored (a no-op returns None, which Huey does not store)"
            )
        return [
            f"{storage} (`bench/peers/huey_app.py`); a new file per run, a copy of one where "
            "SqliteHuey created its tables",
            "enqueue: calling the task N times (`bench/peers/huey_enqueue.py`); Huey has no bulk "
            "enqueue, so each job is one INSERT in its own transaction",
            "worker, per process: `huey_consumer huey_app.huey -w C -k thread -q` (C worker threads; "
            "`-q` = WARNING, as Huey logs each task at INFO); polling defaults (0.1 s initial delay, "
            "backoff 1.15, 10 s max: an idle thread sleeps, a busy one dequeues at once)",
        ]


# --- procrastinate (PostgreSQL) --------------------------------------------------------------

_PROCRASTINATE_APP = "--app=procrastinate_app.app"


class _Procrastinate(SqlSystem):
    name = "procrastinate"
    backend = POSTGRESQL
    pending_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status <> 'succeeded'"
    peer = True

    def setup(self, url: str) -> None:
        argv = [str(peers_venv.bin_path("procrastinate")), _PROCRASTINATE_APP, "schema", "--apply"]
        _run(argv, self.env(url, None), "procrastinate schema --apply")

    def enqueue_argv(self, url: str, jobs: int) -> list[str]:
        return [
            str(peers_venv.python()),
            str(peers_venv.PEERS_DIR / "procrastinate_enqueue.py"),
            str(jobs),
            str(BATCH),
        ]

    def worker_argv(self, url: str, concurrency: int) -> list[str]:
        # --log-level warning: procrastinate logs two INFO lines per job otherwise, AsyncTask none.
        return [
            str(peers_venv.bin_path("procrastinate")), _PROCRASTINATE_APP, "--log-level", "warning",
            "worker", "--concurrency", str(concurrency),
        ]  # fmt: skip

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        return peers_venv.env(BENCH_PG_URL=url, **marker_env(marker))

    def describe(self) -> list[str]:
        return [
            "`App(connector=PsycopgConnector(conninfo=URL))` (psycopg 3, binary build, its default "
            "async pool); the task is an `async def` (procrastinate's native kind: a plain function "
            "would run in a thread pool) (`bench/peers/procrastinate_app.py`); `procrastinate "
            "schema --apply` on a private database, its tables TRUNCATEd before each run",
            f"enqueue: `noop.batch_defer(...)` with {BATCH} jobs per call (one INSERT each) "
            "(`bench/peers/procrastinate_enqueue.py`)",
            "worker, per process: `procrastinate --app=procrastinate_app.app --log-level warning "
            "worker --concurrency C` (C concurrent jobs on one event loop; `--log-level warning` as "
            "procrastinate logs each job at INFO); defaults otherwise: LISTEN/NOTIFY on, 5 s "
            "polling fallback, finished jobs kept (delete_jobs never)",
        ]


def systems(backend: str, tracked: bool) -> list[SqlSystem]:
    """AsyncTask first, then (``tracked``) AsyncTask with a tracked task, then the peers."""
    found: list[SqlSystem] = [_AsyncTask(backend, tracked=False)]
    if tracked:
        found.append(_AsyncTask(backend, tracked=True))
    peers: list[SqlSystem] = (
        [_Huey(normal=False), _Huey(normal=True)] if backend == SQLITE else [_Procrastinate()]
    )
    return found + peers
