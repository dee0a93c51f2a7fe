"""Child processes of the benchmark: spawned in their own session, always killed as a group.

Every process the bench starts goes through ``spawn`` and is remembered until ``stop``; so
``kill_all`` (run from ``finally`` and at exit) can end whatever is left after an error or
Ctrl-C. A new session also keeps the terminal's Ctrl-C away from the workers: the bench
decides when they stop, and in what order.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

_live: dict[int, subprocess.Popen[bytes]] = {}


def spawn(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session (its pid is its process group id); output goes to ``log``."""
    out: IO[bytes] | int = subprocess.DEVNULL if log is None else log.open("ab")
    try:
        proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        if not isinstance(out, int):
            out.close()
    _live[proc.pid] = proc
    return proc


def stop(proc: subprocess.Popen[bytes], *, grace: float) -> float:
    """TERM the group, KILL it after ``grace`` seconds; return how long the process took to exit."""
    start = time.monotonic()
    _signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(5)
    # Children of the leader (none expected) would survive it; sweep the group once more.
    _signal_group(proc.pid, signal.SIGKILL)
    _live.pop(proc.pid, None)
    return time.monotonic() - start


def stop_all(workers: Sequence[subprocess.Popen[bytes]], *, grace: float) -> list[float]:
    """``stop`` every worker at once, so that each one's shutdown wait overlaps the others';
    return how long each took to exit."""
    with ThreadPoolExecutor(max_workers=max(1, len(workers))) as pool:
        return list(pool.map(lambda w: stop(w, grace=grace), workers))


def check_workers(
    workers: Sequence[subprocess.Popen[bytes]], log: Path, done: int, jobs: int, waited: float, timeout: float
) -> None:
    """Raise when a worker exited before the ``jobs`` were done, or ``timeout`` has passed."""
    exited = [w for w in workers if w.poll() is not None]
    if exited:
        raise RuntimeError(f"a worker exited with {exited[0].returncode} after {done} jobs: {log_tail(log)}")
    if waited > timeout:
        raise RuntimeError(f"timed out after {timeout:.0f} s with {done} of {jobs} jobs done")


def kill_all() -> None:
    """KILL every process group the bench started and has not stopped yet."""
    for pid, proc in list(_live.items()):
        _signal_group(pid, signal.SIGKILL)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        _live.pop(pid, None)


atexit.register(kill_all)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class TreeUsage:
    """CPU seconds, context switches and memory of a process and its descendants at one instant."""

    user: float = 0.0
    system: float = 0.0
    #: Voluntary (blocked: I/O, lock, GIL wait) and involuntary (preempted) context switches.
    voluntary: int = 0
    involuntary: int = 0
    rss: int = 0
    pss: int = 0

    @property
    def cpu(self) -> float:
        return self.user + self.system

    def __add__(self, other: TreeUsage) -> TreeUsage:
        return TreeUsage(
            self.user + other.user,
            self.system + other.system,
            self.voluntary + other.voluntary,
            self.involuntary + other.involuntary,
            self.rss + other.rss,
            self.pss + other.pss,
        )

    def __sub__(self, other: TreeUsage) -> TreeUsage:
        return TreeUsage(
            self.user - other.user,
            self.system - other.system,
            self.voluntary - other.voluntary,
            self.involuntary - other.involuntary,
            self.rss,
            self.pss,
        )


def tree_usage(pid: int, *, memory: bool) -> TreeUsage:
    """Sum over ``pid`` and its children; PSS (which reads smaps) only when ``memory`` is true."""
    total = TreeUsage()
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return total
    for proc in procs:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                voluntary, involuntary = _thread_switches(proc)
                full = proc.memory_full_info() if memory else None
        except psutil.Error:
            continue  # exited between listing and reading
        total.user += times.user
        total.system += times.system
        total.voluntary += voluntary
        total.involuntary += involuntary
        if full is not None:
            total.rss += full.rss
            total.pss += full.pss
    return total


def _thread_switches(proc: psutil.Process) -> tuple[int, int]:
    """Context switches of all of ``proc``'s threads.

    psutil's ``num_ctx_switches`` reads ``/proc/PID/status``, which on Linux counts the main
    thread only; the workers' threads are what matter here, so sum ``/proc/PID/task/*``.
    """
    voluntary = involuntary = 0
    try:
        tasks = list(Path(f"/proc/{proc.pid}/task").iterdir())
    except OSError:
        switches = proc.num_ctx_switches()
        return switches.voluntary, switches.involuntary
    for task in tasks:
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # thread ended
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def log_tail(path: Path, size: int = 1500) -> str:
    """The last ``size`` bytes of a child's log, as written."""
    try:
        return path.read_bytes()[-size:].decode("utf-8", "replace")
    except OSError:
        return "(no log)"


def log_line(path: Path, chars: int = 600) -> str:
    """The last ``chars`` characters of a child's log, on one line."""
    try:
        return " ".join(path.read_text(errors="replace")[-chars:].split())
    except OSError:
        return "(no log)"
