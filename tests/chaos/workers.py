"""Worker subprocesses for the chaos tests, and the runs they record.

Each worker is ``python -m asynctask worker -r tests/chaos/chaos_jobs.py`` in its own session,
so that a signal to its process group (kill -9, SIGSTOP, SIGCONT) reaches the flusher child
it may have started as well. Its stderr (the structured log) goes to a file the test reads.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asynctask import Settings
from tests.chaos.state import BrokerState
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "chaos" / "chaos_jobs.py"

#: What a worker logs when it returned a dead process's in-flight jobs (asynctask.recovery).
RECOVERED = re.compile(r"recovered (\d+) in-flight job\(s\) of dead process (\S+) to queue")


@dataclass(frozen=True)
class Timing:
    """The worker settings that decide how fast faults are noticed and repaired."""

    heartbeat: float
    ttl: int
    poll: float = 1.0

    def env(self) -> dict[str, str]:
        return {
            "ASYNCTASK_HEARTBEAT_INTERVAL": str(self.heartbeat),
            "ASYNCTASK_PROCESS_TTL": str(self.ttl),
            "ASYNCTASK_SCHEDULED_POLL_INTERVAL": str(self.poll),
        }


class WorkerProc:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stall(self) -> None:
        """SIGSTOP the whole process: every thread, heartbeat included, freezes."""
        os.killpg(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.pid, signal.SIGCONT)

    def terminate(self, timeout: float = 30) -> int:
        os.killpg(self.pid, signal.SIGTERM)
        return self.proc.wait(timeout)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def thread_stacks(self) -> str:
        """Every thread's stack, which the worker logs on SIGTTIN (for a failure's message)."""
        before = len(self.log_text())
        os.kill(self.pid, signal.SIGTTIN)
        time.sleep(1.0)
        return self.log_text()[before:]

    def log_tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def recovered_from(self) -> list[tuple[int, int]]:
        """(pid of the dead process, jobs) for every recovery this worker logged."""
        return [(int(owner.split(":")[-2]), int(n)) for n, owner in RECOVERED.findall(self.log_text())]


class WorkerPool:
    """Starts workers on one broker; whatever still runs at ``close`` is killed."""

    def __init__(self, tmp: Path, runs: Path) -> None:
        self.tmp = tmp
        self.runs = runs
        self.broker_env: dict[str, str] = {}
        self.timing = Timing(heartbeat=1.0, ttl=5)
        self.started: list[WorkerProc] = []

    def configure(self, settings: Settings, timing: Timing) -> None:
        """Start the next workers on ``settings``' broker with ``timing``."""
        if settings.uses_redis:
            # A Redis broker's tracking database: keep it out of the working directory.
            self.broker_env = {
                "ASYNCTASK_REDIS_URL": settings.redis_url,
                "ASYNCTASK_NAMESPACE": settings.namespace,
                "ASYNCTASK_DATABASE_URL": settings.database_url,
                "ASYNCTASK_REDIS_MIN_REPLICAS": str(settings.redis_min_replicas),
            }
        else:
            self.broker_env = {"ASYNCTASK_BROKER_URL": settings.broker_url}
        self.timing = timing

    def start(
        self,
        state: BrokerState,
        timing: Timing,
        *,
        count: int = 2,
        concurrency: int = 10,
        settings: Settings | None = None,
    ) -> list[WorkerProc]:
        """``count`` workers on ``settings`` (``state``'s by default) with ``timing``, each seen
        live by ``state`` before this returns."""
        self.configure(state.settings if settings is None else settings, timing)
        workers = [self.spawn(concurrency) for _ in range(count)]
        wait_until(lambda: state.live_processes() == count, timeout=30)
        return workers

    def spawn(self, concurrency: int = 10) -> WorkerProc:
        # Variables of the caller's environment that name another broker or database are
        # dropped, so a developer's shell cannot point a test's worker at a shared server.
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASYNCTASK_") and k != "REDIS_URL"}
        env |= self.broker_env | self.timing.env() | {"ASYNCTASK_TEST_RUNS": str(self.runs)}
        name = f"worker-{len(self.started)}"
        log = self.tmp / f"{name}.log"
        command = [sys.executable, "-m", "asynctask", "worker", "-r", str(JOBS), "-c", str(concurrency)]
        command += ["-t", "5"]
        # A file, not a pipe: nobody reads stderr while the test runs, and a full pipe would block.
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                command,
                env=env,
                cwd=self.tmp,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        worker = WorkerProc(name, proc, log)
        self.started.append(worker)
        return worker

    def peer_recovered(self, workers: list[WorkerProc]) -> WorkerProc:
        """Of ``workers``, the one whose jobs a peer returned as a dead process's (else the
        first): the worst one to kill, as a live process's recovery dropped its claims'
        registration."""
        recovered = {pid for worker in self.started for pid, _ in worker.recovered_from()}
        return next((worker for worker in workers if worker.pid in recovered), workers[0])

    def logs(self) -> str:
        """Each worker's log, one line per distinct message: count, first and last time."""
        return "\n".join(
            f"--- {w.name} (pid {w.pid}, {'running' if w.alive() else f'exit {w.proc.returncode}'}):\n"
            + digest(w.log_text())
            for w in self.started
        )

    def close(self) -> None:
        for worker in self.started:
            if worker.alive():
                # SIGKILL ends stopped processes too; no SIGCONT needed.
                os.killpg(worker.pid, signal.SIGKILL)
            try:
                worker.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass


LOGFMT_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def digest(log: str, limit: int = 25) -> str:
    """``count x level logger: msg (first .. last)`` per distinct message of a logfmt log."""
    seen: dict[tuple[str, str, str], list[Any]] = {}
    other: Counter[str] = Counter()
    for line in log.splitlines():
        fields = dict(LOGFMT_FIELD.findall(line))
        if "msg" not in fields:
            # A traceback's head and its last line tell what it was; its frames do not.
            if line and not line[0].isspace():
                other[line[:200]] += 1
            continue
        key = (fields.get("level", "?"), fields.get("logger", "?"), fields["msg"].strip('"'))
        entry = seen.setdefault(key, [0, fields.get("time", "?"), ""])
        entry[0] += 1
        entry[2] = fields.get("time", "?")
    lines = [
        f"  {n} x {level} {logger}: {msg[:200]} ({first} .. {last})"
        for (level, logger, msg), (n, first, last) in list(seen.items())[:limit]
    ]
    if len(seen) > limit:
        lines.append(f"  ... {len(seen) - limit} more distinct messages")
    lines += [f"  {n} x (not logfmt) {line}" for line, n in other.most_common(8)]
    return "\n".join(lines) or "  (empty)"


@dataclass(frozen=True)
class Run:
    event: str
    jid: str
    pid: int
    ppid: int
    at: float

    def by(self, worker_pid: int) -> bool:
        """Whether the worker the test started as ``worker_pid`` ran it (itself or its child)."""
        return worker_pid in (self.pid, self.ppid)


class Runs:
    """The runs file written by tests/chaos/chaos_jobs.py, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.all: list[Run] = []

    def read(self) -> list[Run]:
        try:
            with self.path.open("rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return self.all
        # Only whole lines: a writer may be between two of its own.
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].decode().splitlines():
            event, jid, pid, ppid, at = line.split()
            self.all.append(Run(event, jid, int(pid), int(ppid), float(at)))
        return self.all

    def done(self) -> Counter[str]:
        return Counter(run.jid for run in self.read() if run.event == "done")

    def count_done(self) -> int:
        return sum(1 for run in self.read() if run.event == "done")

    def count_by(self, pid: int) -> int:
        return sum(1 for run in self.read() if run.by(pid))

    def first_done(self, jid: str) -> Run | None:
        return next((run for run in self.read() if run.jid == jid and run.event == "done"), None)

    def wait_done(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` runs are done; False if they were not within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.count_done() < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True
