"""What the RQ integration's tests share: a private Redis database for RQ and AsyncTask, a fresh
PostgreSQL schema for tracking, and real ``rq worker`` subprocesses with the tracked worker class.

RQ's keys have a fixed prefix (``rq:``), so a test cannot share a Redis database with anyone: it
claims an empty one (tests/conftest.py ``claimed_db``), flushed when it ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis
from rq import Queue

from asynctask import Settings
from asynctask.db.migrate import upgrade
from tests.conftest import db_url, fresh_postgres_schema, wait_until
from tests.integrations.rq_jobs import QUEUE
from tests.processes import stop_groups
from tests.records import written_lines

ROOT = Path(__file__).resolve().parents[2]
TRACKED = "asynctask.integrations.rq.TrackedWorker"
#: AsyncTask's key prefix inside the claimed database (its cancel marks, tracking stream).
NAMESPACE = "asynctask-rq"


@dataclass
class RqStack:
    """RQ and AsyncTask on one claimed Redis database, tracking in a fresh PostgreSQL schema."""

    rq_url: str
    settings: Settings
    runs: Path
    logs: Path
    conn: redis.Redis
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def queue(self) -> Queue:
        return Queue(QUEUE, connection=self.conn)

    def env(self, **extra: str) -> dict[str, str]:
        """A worker's environment: this stack's Redis and database, nothing of the caller's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTASK_", "RQ_"))}
        return env | {
            "PYTHONPATH": str(ROOT),
            "ASYNCTASK_REDIS_URL": self.rq_url,
            "ASYNCTASK_NAMESPACE": NAMESPACE,
            "ASYNCTASK_DATABASE_URL": self.settings.database_url,
            "ASYNCTASK_HEARTBEAT_INTERVAL": "0.5",
            "RQ_REDIS_URL": self.rq_url,
            "RQ_TEST_RUNS": str(self.runs),
            **extra,
        }

    def spawn_worker(
        self, *options: str, worker_class: str = TRACKED, **extra: str
    ) -> subprocess.Popen[bytes]:
        """``rq worker -w <worker_class> --url <rq_url> <queue>`` in its own session; its output
        goes to the stack's log."""
        command = [sys.executable, "-m", "rq.cli", "worker", "-w", worker_class, "--url", self.rq_url]
        return self._started([*command, *options, QUEUE], extra)

    def spawn(self, *argv: str, **extra: str) -> subprocess.Popen[bytes]:
        """``python -m asynctask <argv>`` (a flusher) on this stack, in its own session."""
        return self._started([sys.executable, "-m", "asynctask", *argv], extra)

    def _started(self, command: list[str], extra: dict[str, str]) -> subprocess.Popen[bytes]:
        with self.logs.open("ab") as out:
            proc = subprocess.Popen(
                command,
                env=self.env(**extra),
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def starts(self) -> list[str]:
        """The jids of every run started so far, in order (a retried job appears again)."""
        return [line.split()[1] for line in written_lines(self.runs) if line.startswith("start ")]

    def running(self) -> str:
        """The jid of the job running now: the last run noted started and not yet ended (the
        slow job sleeps between the two notes)."""

        def last_started() -> str | None:
            lines = written_lines(self.runs)
            return lines[-1].split()[1] if lines and lines[-1].startswith("start ") else None

        found: str = wait_until(last_started, 20)
        return found

    def horse_of(self, worker: subprocess.Popen[bytes]) -> int:
        """The pid of the work horse ``worker`` has forked, once there is one."""
        found: int = wait_until(
            lambda: next((child.pid for child in psutil.Process(worker.pid).children()), None), 10
        )
        return found

    def stop_all(self) -> None:
        stop_groups(self.procs, 15)


@contextmanager
def rq_stack(claimed_db: int, tmp_path: Path, database_url: str | None = None) -> Iterator[RqStack]:
    """The stack; tracking in ``database_url`` when given (a private server), else in a fresh
    schema of the shared one."""
    url = db_url(claimed_db)
    conn = redis.Redis.from_url(url)
    with ExitStack() as schemas:
        database = database_url or schemas.enter_context(fresh_postgres_schema())
        upgrade(database)
        settings = Settings(redis_url=url, namespace=NAMESPACE, database_url=database)
        stack = RqStack(url, settings, tmp_path / "runs.txt", tmp_path / "workers.log", conn)
        try:
            yield stack
        finally:
            stack.stop_all()
            conn.close()
