"""Where a worker process's job threads run: on one CPU while its jobs come in batches.

CPython's threads take turns holding the GIL. A thread that lets go of it for a moment (a
write, a wait on a lock) hands it to a thread waiting on another CPU, and when its call returns
microseconds later it waits in turn: with short jobs, every job costs two thread wake-ups
across CPUs. Threads that share one CPU do not trade the GIL that way: the kernel runs the next
one when the first blocks. (One process x 10 threads of no-op jobs on Redis, 2 CPUs: 57,000
jobs/s and 15 µs of CPU per job on one CPU, 29,500 jobs/s and 38 µs spread over both; two
processes: 84,000 jobs/s on a CPU each, 56,000 spread.)

So while the jobs come in batches (they run shorter than a claim's round trip, and each claim
finds several: ``Fetcher.jobs_come_in_batches``), each processor thread keeps to the process's
CPU. Otherwise the threads may run on every CPU the process may use: a long job may run native
code on several CPUs at once, or start programs, which inherit the CPUs of the thread that
started them; and jobs that come one at a time find their threads idle, with no GIL to trade,
while a thread held to a CPU that something else is using would wait for it rather than run
at once on another (one worker taking 1,000 single jobs a second: p99 from push to start 0.48
ms held, 0.38 ms free). The process's other threads (heartbeat, poller, event loop) are never
held.

The process's CPU is the allowed one that the fewest other worker processes of this user on
this host hold (a small file in the temporary directory, read and written under a lock), so
that the processes of one host spread over its CPUs. Each heartbeat looks at the CPUs' use
since the last one: when other work took more than ``CONTENDED`` of the process's CPU, and
another allowed CPU was idle for a share of the time ``MARGIN`` larger than what other work
left of the process's CPU, the job threads move there.

``cpu_pinning = False`` (``ASYNCTASK_CPU_PINNING=false``, ``--no-cpu-pinning``) leaves every
thread on every allowed CPU.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

logger = logging.getLogger("asynctask.placement")

#: Share of the process's CPU that other work took since the last look beyond which the job
#: threads look for another CPU.
CONTENDED = 0.3
#: How much larger a share of its time another CPU must have been idle than the share of the
#: process's CPU that other work left, for the job threads to move there.
MARGIN = 0.2


@dataclass(frozen=True)
class CpuTimes:
    """Seconds of one CPU since boot, as ``/proc/stat`` gives them."""

    busy: float
    idle: float


def read_cpu_times(path: str = "/proc/stat") -> dict[int, CpuTimes]:
    """Busy and idle seconds of each CPU (idle counts waiting for I/O)."""
    ticks = os.sysconf("SC_CLK_TCK")
    times: dict[int, CpuTimes] = {}
    with open(path, encoding="ascii") as stat:
        for line in stat:
            name, _, rest = line.partition(" ")
            if not name.startswith("cpu") or name == "cpu":
                continue
            fields = [int(value) for value in rest.split()]
            idle = fields[3] + fields[4]
            times[int(name[3:])] = CpuTimes((sum(fields[:8]) - idle) / ticks, idle / ticks)
    return times


def freer_cpu(
    cpu: int, seconds: float, own: float, before: Mapping[int, CpuTimes], after: Mapping[int, CpuTimes]
) -> int | None:
    """The CPU the job threads should move to from ``cpu``, or None to stay: over ``seconds``,
    the process used ``own`` seconds of CPU (all on ``cpu``) and the CPUs' times went from
    ``before`` to ``after`` (only the CPUs the process may use)."""
    if seconds <= 0 or cpu not in before or cpu not in after:
        return None
    others = (after[cpu].busy - before[cpu].busy - own) / seconds
    if others <= CONTENDED:
        return None
    idle = {c: (after[c].idle - before[c].idle) / seconds for c in after if c != cpu and c in before}
    best = max(idle, key=lambda c: (idle[c], -c), default=None)
    if best is None or idle[best] < 1 - others + MARGIN:
        return None
    return best


class CpuRegistry:
    """Which CPU each worker process of this user on this host holds: ``{pid: cpu}`` as JSON in
    one file, read and written under an exclusive lock; entries of processes gone are dropped."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.path.join(tempfile.gettempdir(), f"asynctask-cpus-{os.getuid()}")

    def hold(self, pid: int, candidates: frozenset[int]) -> int:
        """Record ``pid`` on the candidate CPU held by the fewest other processes (the lowest
        numbered among equals); return it."""
        # Not through a link: the temporary directory is everyone's.
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with open(descriptor, "r+", encoding="ascii") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            file.seek(0)
            held = {p: c for p, c in _parsed(file.read()).items() if p != pid and _alive(p)}
            counts = dict.fromkeys(candidates, 0)
            for other in held.values():
                if other in counts:
                    counts[other] += 1
            cpu = min(counts, key=lambda c: (counts[c], c))
            held[pid] = cpu
            file.seek(0)
            file.truncate()
            file.write(json.dumps({str(p): c for p, c in held.items()}))
            return cpu


def _parsed(text: str) -> dict[int, int]:
    """The registry's entries; a file another program wrote over counts as empty."""
    try:
        raw = json.loads(text or "{}")
        return {int(pid): int(cpu) for pid, cpu in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Alive, and another user's.
        pass
    return True


class Placement:
    """The CPU of one worker process's job threads, held or freed all together.

    Each processor thread calls ``for_jobs`` before its job, which compares the CPU the
    threads should be held to (None: free) with the one they are held to, and only when they
    differ sets the CPUs of every enrolled thread at once.
    """

    def __init__(self, enabled: bool, registry: CpuRegistry | None = None) -> None:
        #: The CPUs this process may use; none known where the system has no CPU affinity (macOS).
        self.allowed = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else frozenset()
        #: Off, or nothing to choose from: no thread is ever held to one CPU.
        self.enabled = enabled and len(self.allowed) > 1
        self.registry = registry or CpuRegistry()
        #: The process's CPU, once taken.
        self.cpu: int | None = None
        #: The CPU the enrolled threads are held to; None: they are free.
        self._held: int | None = None
        #: Native ids of the processor threads.
        self._threads: set[int] = set()
        self._lock = threading.Lock()
        #: When the CPUs' times and the process's CPU seconds were last read, and what they were.
        self._sample: tuple[float, dict[int, CpuTimes], float] | None = None

    def enroll(self, tid: int) -> None:
        """A processor thread starts: it runs where the others do (not where the thread that
        started it ran)."""
        if not self.enabled:
            return
        with self._lock:
            self._threads.add(tid)
            self._set([tid], self._held)

    def leave(self, tid: int) -> None:
        with self._lock:
            self._threads.discard(tid)

    def for_jobs(self, batched: bool) -> None:
        """Before a job: hold the processor threads to the process's CPU if the jobs come in
        batches (and pinning is on), else free them."""
        wanted = None
        if batched and self.enabled:
            if self.cpu is None:
                self._choose(None)
            wanted = self.cpu
        if wanted != self._held:
            with self._lock:
                self._set(list(self._threads), wanted)
                self._held = wanted if self.enabled else None

    def _set(self, tids: list[int], cpu: int | None) -> None:
        """Hold threads ``tids`` to ``cpu``, or free them (None) (hold ``_lock``)."""
        mask = self.allowed if cpu is None else {cpu}
        for tid in tids:
            try:
                os.sched_setaffinity(tid, mask)
            except ProcessLookupError:
                # The thread ended between its last job and its leaving.
                self._threads.discard(tid)
            except OSError as exc:
                # The CPUs this process may use changed under it (a cpuset, a CPU taken
                # offline): from now on every thread runs where the system lets it.
                logger.warning("cannot set the CPUs of the job threads; pinning is off: %s", exc)
                self.enabled = False
                return

    @contextmanager
    def freed(self) -> Iterator[None]:
        """The calling thread runs on every allowed CPU meanwhile, so that the threads it
        starts do not inherit its CPU."""
        if not self.enabled:
            yield
            return
        held = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.allowed)
        try:
            yield
        finally:
            os.sched_setaffinity(0, held)

    def review(self) -> None:
        """Move the job threads off a CPU that other work took much of since the last review,
        to one that was idle; called by the heartbeat thread, which it must not end: a failure
        is logged, and the threads stay where they are."""
        if self.cpu is None or not self.enabled:
            return
        try:
            self._review(self.cpu)
        except Exception:
            logger.exception("could not review the CPU of the job threads; they stay where they are")

    def _review(self, cpu: int) -> None:
        sample = (time.monotonic(), _allowed_times(self.allowed), time.process_time())
        last, self._sample = self._sample, sample
        if last is None or self._held is None:
            return
        freer = freer_cpu(cpu, sample[0] - last[0], sample[2] - last[2], last[1], sample[1])
        if freer is not None:
            self._choose(frozenset({freer}))

    def _choose(self, destination: frozenset[int] | None) -> None:
        """Take a CPU: the first time (``destination`` None), one of the allowed; to move, the
        one ``destination`` holds."""
        with self._lock:
            if destination is None and self.cpu is not None:
                return
            candidates = self.allowed if destination is None else destination
            previous = self.cpu
            try:
                cpu = self.registry.hold(os.getpid(), candidates)
            except OSError as exc:
                logger.warning("cannot read or write the CPU registry %s: %s", self.registry.path, exc)
                cpu = min(candidates)
            self.cpu = cpu
        if previous is not None and previous != cpu:
            logger.info("job threads moved to another CPU", extra={"fields": {"from": previous, "to": cpu}})


def _allowed_times(allowed: frozenset[int]) -> dict[int, CpuTimes]:
    return {cpu: times for cpu, times in read_cpu_times().items() if cpu in allowed}
