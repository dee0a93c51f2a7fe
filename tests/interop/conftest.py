"""Fixtures for the interoperability tests with the real Ruby Sidekiq 6.4 (Debian's ruby-sidekiq).

Every test runs in its own Redis database (``claimed_db``); the Ruby scripts, the ``sidekiq``
server and the ``asynctask worker`` subprocesses are all pointed at it, and every process a
test starts is killed (its whole process group) when the test ends.

Ruby and Sidekiq are required: CI installs them, so their absence fails the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import redis

from asynctask import Client, Registry, Settings
from asynctask.job import JobSetter
from tests.conftest import db_url, wait_until
from tests.interop.interop_jobs import define

HERE = Path(__file__).resolve().parent
RUBY_DIR = HERE / "ruby"
REPO_ROOT = HERE.parent.parent
JOBS_FILE = HERE / "interop_jobs.py"
#: Seconds any one Ruby helper script may take.
RUBY_TIMEOUT = 30.0


@pytest.fixture(scope="session")
def sidekiq_version() -> str:
    """The installed Sidekiq version; fails (not skips) the tests if Ruby or Sidekiq is missing."""
    for tool in ("ruby", "sidekiq"):
        if shutil.which(tool) is None:
            pytest.fail(
                f"`{tool}` is not on PATH: install Debian's ruby-sidekiq (6.4) to run the interop tests"
            )
    done = subprocess.run(
        ["ruby", "-e", 'require "sidekiq"; require "sidekiq/api"; print Sidekiq::VERSION'],
        capture_output=True,
        text=True,
        timeout=RUBY_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"ruby cannot load sidekiq: {done.stderr.strip()}")
    version = done.stdout.strip()
    if not version.startswith("6.4."):
        pytest.fail(f"these tests expect Sidekiq 6.4 (Debian's ruby-sidekiq), found {version}")
    return version


@pytest.fixture
def redis_url(claimed_db: int, sidekiq_version: str) -> str:
    """The URL of this test's own database, for Ruby and Python alike."""
    return db_url(claimed_db)


@pytest.fixture
def db(redis_url: str) -> Iterator[redis.Redis]:
    """A client of this test's database (bytes in, bytes out)."""
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


RunRuby = Callable[..., Any]


@pytest.fixture
def ruby(redis_url: str) -> RunRuby:
    """``ruby(script, *args, stdin=obj)``: run ``ruby/<script>``, return the JSON it printed."""

    def run(script: str, *args: str, stdin: Any = None) -> Any:
        env = {**os.environ, "INTEROP_REDIS_URL": redis_url, "REDIS_URL": redis_url}
        try:
            done = subprocess.run(
                ["ruby", str(RUBY_DIR / script), *args],
                input=json.dumps(stdin, ensure_ascii=False) if stdin is not None else "",
                capture_output=True,
                text=True,
                encoding="utf-8",
                env=env,
                timeout=RUBY_TIMEOUT,
                start_new_session=True,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"ruby {script} {' '.join(args)} timed out after {RUBY_TIMEOUT} s") from exc
        if done.returncode != 0:
            raise AssertionError(f"ruby {script} {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
        try:
            return json.loads(done.stdout)
        except ValueError:
            raise AssertionError(f"ruby {script} printed no JSON: {done.stdout!r}\n{done.stderr}") from None

    return run


class Service:
    """A long-running subprocess (a worker) in its own process group, logging to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self._log: IO[bytes] = tempfile.TemporaryFile(prefix=f"interop-{name}-")
        try:
            self.popen = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            self._log.close()
            raise

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def log(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def signal(self, signum: int) -> None:
        if self.running():
            os.killpg(self.popen.pid, signum)

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def close(self) -> None:
        """Stop the process group: TERM, then KILL if it lingers."""
        try:
            if self.running():
                self.signal(signal.SIGTERM)
                try:
                    self.popen.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)  # anything the group left behind
            except ProcessLookupError:
                pass
            self.popen.wait(10)
        finally:
            log = self.log()
            self._log.close()
            if log:
                print(f"--- {self.name} (pid {self.popen.pid}) output ---\n{log}")


def _process_registered(db: redis.Redis, pid: int) -> str | None:
    """The identity of the process with ``pid`` once its heartbeat is in Redis."""
    for raw in db.smembers("processes"):
        info = db.hget(raw, "info")
        if info and json.loads(info).get("pid") == pid:
            return str(raw.decode())
    return None


class Services:
    """Starts workers for one test and stops them all at teardown."""

    def __init__(self, redis_url: str, db: redis.Redis) -> None:
        self.redis_url = redis_url
        self.db = db
        self.started: list[Service] = []

    def python_worker(self, *extra: str, heartbeat: float = 1.0, **env: str) -> tuple[Service, str]:
        """``python -m asynctask worker -r interop_jobs.py -q default -c 2``; returns it and its identity."""
        environ = {
            **os.environ,
            "ASYNCTASK_REDIS_URL": self.redis_url,
            "ASYNCTASK_HEARTBEAT_INTERVAL": str(heartbeat),
            "PYTHONPATH": str(REPO_ROOT),
            **env,
        }
        environ.pop("REDIS_URL", None)
        environ.pop("ASYNCTASK_NAMESPACE", None)
        argv = [sys.executable, "-m", "asynctask", "worker", "-r", str(JOBS_FILE), "-q", "default", "-c", "2"]
        return self._start("asynctask-worker", [*argv, "-t", "3", *extra], environ, REPO_ROOT)

    def sidekiq(self) -> tuple[Service, str]:
        """``sidekiq -r ruby/interop_worker.rb -q default -c 2``; returns it and its identity."""
        environ = {**os.environ, "REDIS_URL": self.redis_url}
        argv = ["sidekiq", "-r", str(RUBY_DIR / "interop_worker.rb"), "-q", "default", "-c", "2", "-t", "2"]
        return self._start("sidekiq", argv, environ, RUBY_DIR)

    def _start(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> tuple[Service, str]:
        service = Service(name, argv, env, cwd)
        self.started.append(service)

        def registered() -> str | None:
            if not service.running():
                raise AssertionError(f"{name} exited with {service.popen.returncode}:\n{service.log()}")
            return _process_registered(self.db, service.pid)

        try:
            identity: str = wait_until(registered, timeout=20, interval=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{name} did not register its heartbeat: {exc}\n{service.log()}") from None
        return service, identity

    def close(self) -> None:
        for service in self.started:
            service.close()


@pytest.fixture
def services(redis_url: str, db: redis.Redis) -> Iterator[Services]:
    started = Services(redis_url, db)
    yield started
    started.close()


PythonJob = Callable[..., JobSetter]


@pytest.fixture
def python_job(redis_url: str, db: redis.Redis) -> PythonJob:
    """``python_job(name, **options)``: a job of ``interop_jobs.py``, pushing to this test's database.

    The definitions are client-side twins (same names and options) in a fresh ``Registry``.
    """
    registry = Registry()
    client = Client(Settings(redis_url=redis_url), connection=db, registry=registry)
    definitions = define(registry)

    def setter(name: str, **options: Any) -> JobSetter:
        return definitions[name].set(client=client, **options)

    return setter
