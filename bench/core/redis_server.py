"""A private, throw-away redis-server for the bench (never the shared one on 6379).

No persistence (``--save "" --appendonly no``) so that no fork or fsync lands in the middle
of a measurement, and FLUSHALL between runs is free to use.
"""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path
from typing import Any

import redis

from bench.core import procs

FIRST_PORT = 6390
LAST_PORT = 6499


def free_port(first: int = FIRST_PORT, last: int = LAST_PORT) -> int:
    """The first port in [first, last] that nothing listens on."""
    for port in range(first, last + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {first} and {last}")


class RedisServer:
    """``with RedisServer(workdir) as server:`` starts redis-server and always stops it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.pid = 0
        self._proc: Any = None

    def __enter__(self) -> RedisServer:
        argv = [
            shutil.which("redis-server") or "redis-server",
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.workdir),
            "--daemonize", "no",
        ]  # fmt: skip
        self._proc = procs.spawn(argv, env={}, cwd=self.workdir, log=self.workdir / "redis.log")
        self.pid = self._proc.pid
        deadline = time.monotonic() + 10
        with self.client() as conn:
            while True:
                try:
                    conn.ping()
                    break
                except redis.ConnectionError:
                    if self._proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                    time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            procs.stop(self._proc, grace=5)
            self._proc = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def version(self) -> str:
        with self.client() as conn:
            return str(conn.info("server")["redis_version"])
