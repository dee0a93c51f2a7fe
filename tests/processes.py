"""Processes a test starts: a free port to give them, their output read as it comes, and
stopping the runtime workers, each in a session (process group) of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_module(
    module: str, *argv: str, cwd: Path, env: Mapping[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m module argv...`` in this interpreter, to its end, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class LineReader:
    """The lines of a child's pipe so far, read by a thread of their own: a pipe nobody reads
    fills up and blocks the child."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def worker_argv(jobs: Path, *options: str) -> list[str]:
    """``python -m asynctask worker -r jobs options...`` in this interpreter."""
    return [sys.executable, "-m", "asynctask", "worker", "-r", str(jobs), *options]


class Sessions:
    """Commands each started in a session of its own, so that killing its process group also
    ends any child it started."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: list[str], env: Mapping[str, str], cwd: Path) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, env=dict(env), cwd=cwd, start_new_session=True)
        self.procs.append(proc)
        return proc

    def kill(self) -> None:
        """KILL the groups of those still running and reap them all: what a test left behind."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def stop_groups(procs: Iterable[subprocess.Popen[bytes]], grace: float = 20.0) -> None:
    """TERM every process group still running, all at once, then KILL those that outlive ``grace``
    seconds: a runtime's main process and the processes it forked go together."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
