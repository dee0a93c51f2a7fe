"""What the Dramatiq tests share: real ``dramatiq`` worker processes on a Redis database of the
test's own (or on RabbitMQ, in queues of the test's own), the tests' actors declared on a sending
broker, the runs file the actors append to.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import dq_name, xq_name

# As in an application's broker module: importing the integration lets create_task take an actor.
import asynctask.integrations.dramatiq  # noqa: F401
from asynctask import Settings
from tests.integrations.dramatiq_jobs import MAX_RETRIES, QUEUE, Actors, declare
from tests.processes import stop_groups
from tests.records import written_lines

ROOT = Path(__file__).resolve().parents[2]
WORKER_MODULE = "tests.integrations.dramatiq_worker"


@dataclass
class Runtime:
    """One test's Dramatiq: a broker to send with, and the worker processes it started."""

    #: The environment that names the workers' broker (read by ``dramatiq_worker``).
    broker_env: dict[str, str]
    settings: Settings
    runs_file: Path
    logs: Path
    broker: dramatiq.Broker
    queue: str
    actors: Actors
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(
        self, processes: int = 1, threads: int = 8, options: Sequence[str] = (), **extra: str
    ) -> subprocess.Popen[bytes]:
        """``dramatiq tests.integrations.dramatiq_worker -p N -t M [options]`` in its own
        process group, with ``extra`` environment variables."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTASK_", "DRAMATIQ_"))}
        env |= {
            "PYTHONPATH": _python_path(),
            **self.broker_env,
            **self.tracking_env(),
            "ASYNCTASK_TEST_RUNS": str(self.runs_file),
            **extra,
        }
        command = [sys.executable, "-m", "dramatiq", WORKER_MODULE, "-p", str(processes), "-t", str(threads)]
        command += options
        log = (self.logs / f"worker-{len(self.procs)}.log").open("ab")
        proc = subprocess.Popen(
            command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.procs.append(proc)
        return proc

    def spawn_flusher(self) -> subprocess.Popen[bytes]:
        """``asynctask flusher`` applying the tracking stream to SQL in a process of its own."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_")}
        env |= {"PYTHONPATH": _python_path(), **self.tracking_env()}
        log = (self.logs / f"flusher-{len(self.procs)}.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "asynctask", "flusher"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def tracking_env(self) -> dict[str, str]:
        """AsyncTask's settings for the workers: Redis only when the test's settings have it."""
        env = {"ASYNCTASK_DATABASE_URL": self.settings.database_url}
        if self.settings.redis_url:
            env |= {
                "ASYNCTASK_REDIS_URL": self.settings.redis_url,
                "ASYNCTASK_NAMESPACE": self.settings.namespace,
            }
        return env

    def queued(self) -> int:
        """Messages of the test's queue: on Redis those not yet acknowledged (waiting, delayed
        or running), on RabbitMQ those waiting or delayed."""
        if isinstance(self.broker, RabbitmqBroker):
            return sum(self.broker.get_queue_message_counts(self.queue)[:2])
        return int(cast(RedisBroker, self.broker).do_qsize(self.queue))

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker's whole process group: its main process and its worker processes."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        stop_groups(self.procs, 20)

    def starts(self) -> list[tuple[str, int, float]]:
        """Every start an actor recorded: (jid, pid, time)."""
        found = []
        for line in written_lines(self.runs_file):
            _, jid, pid, at = line.split()
            found.append((jid, int(pid), float(at)))
        return found

    def worker_logs(self) -> str:
        return "\n".join(path.read_text(errors="replace")[-4000:] for path in sorted(self.logs.glob("*.log")))


def _python_path() -> str:
    """This worktree first, then the caller's path (another Dramatiq version to test against)."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


@contextmanager
def dramatiq_runtime(redis_url: str, database_url: str, tmp_path: Path) -> Iterator[Runtime]:
    """A Dramatiq runtime whose broker and AsyncTask's Redis keys live under fresh prefixes of
    ``redis_url`` (a database the test owns: the Redis broker's dead-worker sweep scans keys)."""
    suffix = uuid.uuid4().hex[:10]
    settings = Settings(redis_url=redis_url, namespace=f"at-{suffix}", database_url=database_url)
    broker = RedisBroker(url=redis_url, namespace=f"dq-{suffix}")  # type: ignore[no-untyped-call]
    env = {"DRAMATIQ_TEST_REDIS_URL": redis_url, "DRAMATIQ_TEST_NAMESPACE": f"dq-{suffix}"}
    with _runtime(env, settings, broker, QUEUE, tmp_path) as runtime:
        yield runtime


@contextmanager
def rabbitmq_runtime(rabbitmq_url: str, database_url: str, tmp_path: Path) -> Iterator[Runtime]:
    """A Dramatiq runtime on RabbitMQ, in queues of its own (deleted afterwards), tracking with
    no Redis at all: the workers write the tracking database themselves."""
    queue = f"imports-{uuid.uuid4().hex[:10]}"
    broker = RabbitmqBroker(url=rabbitmq_url)
    env = {"DRAMATIQ_TEST_RABBITMQ_URL": rabbitmq_url, "DRAMATIQ_TEST_QUEUE": queue}
    try:
        with _runtime(env, Settings(database_url=database_url), broker, queue, tmp_path) as runtime:
            yield runtime
    finally:
        reopened = RabbitmqBroker(url=rabbitmq_url)
        for name in (queue, dq_name(queue), xq_name(queue)):
            reopened.channel.queue_delete(name)
        reopened.close()


@contextmanager
def _runtime(
    env: dict[str, str], settings: Settings, broker: dramatiq.Broker, queue: str, tmp_path: Path
) -> Iterator[Runtime]:
    logs = tmp_path / "logs"
    logs.mkdir()
    runtime = Runtime(env, settings, tmp_path / "runs.txt", logs, broker, queue, declare(broker, queue))
    try:
        yield runtime
    finally:
        runtime.stop_all()
        broker.close()


def item(n: int, outcome: str, sleep: float = 0.0) -> dict[str, Any]:
    return {"n": n, "outcome": outcome, "sleep": sleep}


def outcome_of(n: int) -> str:
    """Of 100 items: 10 crash (n = 3, 13, ...), 15 fail, 75 succeed."""
    if n % 10 == 3:
        return "crash"
    if n % 20 in (5, 7, 15):
        return "fail"
    return "ok"


#: The task of the HTTP API test and of the outage test.
ITEMS = [item(n, outcome_of(n)) for n in range(100)]


def expected_log(n: int, outcome: str) -> list[str]:
    run = ["started", f"item {n}"]
    if outcome == "ok":
        return [*run, "finished"]
    if outcome == "fail":
        return [*run, f"item {n} refused"]
    broke = f"RuntimeError: item {n} broke"
    log: list[str] = []
    for retry in range(1, MAX_RETRIES + 1):
        log += [*run, broke, f"waiting for retry {retry} of {MAX_RETRIES}"]
    return [*log, *run, broke, "no retries left"]
