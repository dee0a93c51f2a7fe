"""A private, throw-away redis-server that the chaos tests may pause, kill and restart.

Never the shared server on 6379: each instance gets a free port and its own directory. Its
append-only file is written with ``appendfsync always``, and Redis writes the file before it
replies, so a ``kill -9`` then a restart on the same port and directory loses no write any
client saw acknowledged: what the tests take away is the server, never the data.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import redis

from tests.chaos.workers import Runs
from tests.processes import free_port

#: Seconds a start (including loading the append-only file) may take.
START_TIMEOUT = 30.0


class RedisUnavailable(RuntimeError):
    """This machine cannot run a private redis-server (the binary is missing)."""


class PrivateRedis:
    """One server: ``start``, ``kill`` (-9), ``shutdown``, ``pause`` (SIGSTOP), ``resume``."""

    def __init__(self, binary: str, root: Path) -> None:
        self.binary = binary
        self.root = root
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        #: More command-line settings (a replica's ``--replicaof``).
        self.extra: list[str] = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.root / "redis.log"

    def start(self) -> None:
        """Start (on a new free port the first time, on the same one after) and wait for PING."""
        if self.proc is not None:
            raise RuntimeError("redis-server is already running")
        attempts = 1 if self.port else 5
        for _ in range(attempts):
            port = self.port or free_port()
            try:
                self._start_on(port)
            except RuntimeError:
                # Someone else took the free port between the probe and the start.
                if attempts == 1:
                    raise
                continue
            self.port = port
            return
        raise RuntimeError(f"could not start a private redis-server:\n{self.log_tail()}")

    def _start_on(self, port: int) -> None:
        command = [
            self.binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(self.root),
            "--logfile", str(self.log),
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--save", "",
            "--daemonize", "no",
            *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + START_TIMEOUT
        probe = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)
        try:
            while True:
                if self.proc.poll() is not None:
                    self.proc = None
                    raise RuntimeError(f"redis-server on port {port} exited:\n{self.log_tail()}")
                try:
                    # LOADING (the append-only file) is an error reply: PING succeeds once loaded.
                    if probe.ping():
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"redis-server on port {port} did not start:\n{self.log_tail()}")
                time.sleep(0.02)
        finally:
            probe.close()

    def kill(self) -> None:
        """``kill -9``: no goodbye to the clients, no final write (the file has everything)."""
        if self.proc is None:
            return
        self.proc.kill()
        self.proc.wait(10)
        self.proc = None
        self.paused = False

    def shutdown(self) -> None:
        """A clean stop (SHUTDOWN): Redis closes every connection, then exits."""
        if self.proc is None:
            return
        self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def pause(self) -> None:
        """SIGSTOP: connections stay open, nothing is answered until ``resume``."""
        assert self.proc is not None, "redis-server is not running"
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.paused:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_connect_timeout=5, socket_timeout=30)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


def redis_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RedisUnavailable("redis-server is not on PATH")
    return binary


@contextlib.contextmanager
def scratch_directory(prefix: str) -> Iterator[Path]:
    """A directory of its own, removed on exit. On tmpfs when there is one: appendfsync always
    then costs no disk flush per write, and a killed server loses nothing either way (the
    kernel holds what Redis wrote)."""
    shm = Path("/dev/shm")
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=shm if shm.is_dir() else None))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


class Killable(Protocol):
    def start(self) -> None: ...

    def kill(self) -> None: ...


K = TypeVar("K", bound=Killable)


@contextlib.contextmanager
def started(make: Callable[[str, Path], K], prefix: str) -> Iterator[K]:
    """``make(redis-server's path, a scratch directory)``, started; killed and its directory
    removed on exit, whatever happened."""
    binary = redis_binary()
    with scratch_directory(prefix) as root:
        servers = make(binary, root)
        try:
            servers.start()
            yield servers
        finally:
            servers.kill()


def private_redis() -> contextlib.AbstractContextManager[PrivateRedis]:
    """A started private redis-server; killed and its directory removed on exit, whatever happened."""
    return started(PrivateRedis, "asynctask-redis-")


@dataclass(frozen=True)
class Outages:
    """Jobs done when each outage ended, and whether the drain went on after it."""

    after_pause: int
    progressed_after_pause: bool
    after_restart: int
    progressed_after_restart: bool


def pause_then_kill(
    server: PrivateRedis, runs: Runs, paused: float, stopped: float, runs_between: int
) -> Outages:
    """Pause the server ``paused`` seconds, then kill it and restart it ``stopped`` seconds
    later (from its append-only file), waiting after each for ``runs_between`` more runs (60 s
    at most)."""
    server.pause()
    time.sleep(paused)
    server.resume()
    after_pause = runs.count_done()
    progressed_after_pause = runs.wait_done(after_pause + runs_between, 60)
    server.kill()
    time.sleep(stopped)
    server.start()
    after_restart = runs.count_done()
    progressed_after_restart = runs.wait_done(after_restart + runs_between, 60)
    return Outages(after_pause, progressed_after_pause, after_restart, progressed_after_restart)
