"""Memory of one worker process: RSS at idle, after every tenth of N jobs, and its peak.

The jobs go in in chunks, each only once the previous one has run, so Redis never holds
more than one chunk: what grows is the worker, not a backlog it has fetched or buffered.
A worker that keeps no state per job should end where it stood halfway through; the first
half is allowed to grow (allocator arenas, caches, lazily imported modules), which is why
the leak figure is the growth over the second half, not over the whole run.

RSS is summed over the worker's process tree. A fork-per-job worker (RQ's default Worker)
has a short-lived child per job whose RSS counts the pages it shares with its parent a
second time; so checkpoints are taken once the tree is back to the processes it had at idle,
and the table shows the tree's peak (with PSS, which splits shared pages fairly) next to the
peak of the worker process alone.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from bench.core import document, procs
from bench.core.redis_server import RedisServer
from bench.core.system import System, only
from bench.core.timing import MEMORY_SAMPLE, MIN_TIMEOUT, POLL, STOP_GRACE

MIB = 2**20
#: Checkpoints per run: one after every tenth of the jobs.
CHUNKS = 10
#: Jobs per push_bulk call of a chunk.
BATCH = 1000
#: Seconds the worker stays idle after its first job before the idle sample.
IDLE_S = 5.0
#: How long a checkpoint waits for the tree to shed its per-job children.
SETTLE_S = 2.0


class Checkpoint(NamedTuple):
    #: Jobs done (the warm-up job not counted).
    jobs: int
    rss: int
    pss: int


@dataclass
class MemoryRun:
    system: str
    jobs: int
    concurrency: int
    #: Worker tree after its first job and ``IDLE_S`` seconds of idling.
    idle_rss: int = 0
    idle_pss: int = 0
    #: Worker tree after each chunk has run (and per-job children have exited).
    checkpoints: list[Checkpoint] = field(default_factory=list)
    #: Worker tree, sampled every 100 ms from spawn to the last job done.
    peak_rss: int = 0
    peak_pss: int = 0
    #: The worker process alone (the tree's root), same samples.
    peak_main_rss: int = 0
    #: Spawn to the last job done.
    seconds: float = 0.0
    error: str = ""

    @property
    def halfway(self) -> Checkpoint | None:
        """The first checkpoint at or past half the jobs."""
        return next((c for c in self.checkpoints if 2 * c.jobs >= self.jobs), None)

    @property
    def growth(self) -> int:
        """RSS after all jobs minus RSS halfway: warm-up is over by then, a leak is not."""
        mid = self.halfway
        return self.checkpoints[-1].rss - mid.rss if mid is not None else 0


class _Sample(NamedTuple):
    rss: int
    pss: int
    main_rss: int
    processes: int


def _sample(pid: int) -> _Sample:
    """RSS and PSS of ``pid`` and its descendants, and RSS of ``pid`` alone."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return _Sample(0, 0, 0, 0)
    rss = pss = main = count = 0
    for proc in tree:
        try:
            full = proc.memory_full_info()
        except psutil.Error:
            continue  # exited between listing and reading
        rss, pss, count = rss + full.rss, pss + full.pss, count + 1
        if proc.pid == pid:
            main = full.rss
    return _Sample(rss, pss, main, count)


class _Watch:
    """The worker, its marker file, and the peaks of every sample taken."""

    def __init__(self, run: MemoryRun, worker: subprocess.Popen[bytes], marker: Path) -> None:
        self.run = run
        self.worker = worker
        self.marker = marker
        self.next_sample = 0.0

    def sample(self) -> _Sample:
        s = _sample(self.worker.pid)
        run = self.run
        run.peak_rss, run.peak_pss = max(run.peak_rss, s.rss), max(run.peak_pss, s.pss)
        run.peak_main_rss = max(run.peak_main_rss, s.main_rss)
        self.next_sample = time.monotonic() + MEMORY_SAMPLE
        return s

    def until(self, done: int, enqueuer: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
        """Poll until ``done`` jobs have run and the enqueuer has exited; sample meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            size = os.stat(self.marker).st_size
            enqueued = enqueuer.poll()
            if enqueued not in (None, 0):
                raise RuntimeError(f"enqueue exited with {enqueued}: {procs.log_tail(log)}")
            if size >= done and enqueued == 0:
                return
            now = time.monotonic()
            if now >= self.next_sample:
                self.sample()
            if self.worker.poll() is not None:
                raise RuntimeError(f"worker exited with {self.worker.returncode} after {size} jobs")
            if now > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s with {size} of {done} jobs done")
            time.sleep(POLL)

    def settled(self, processes: int) -> _Sample:
        """A sample once the tree has no more processes than at idle (or after ``SETTLE_S``)."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            s = self.sample()
            if s.processes <= processes or time.monotonic() > deadline:
                return s
            time.sleep(POLL)


def _enqueue(
    system: System, server: RedisServer, count: int, batch: int, log: Path
) -> subprocess.Popen[bytes]:
    argv = system.enqueue_argv(server.url, "bulk", count, batch)
    return procs.spawn(argv, env=system.env(server.url, None), cwd=system.cwd, log=log)


def run(
    settings: dict[str, Any], systems: list[System], server: RedisServer, workdir: Path
) -> list[MemoryRun]:
    """One run per system of the settings."""
    s = settings
    runs = []
    for system in only(systems, s["systems"]):
        run = measure(system, server, _jobs(system, s["jobs"]), workdir, s["concurrency"], s["idle_s"])
        summary = run.error or f"idle {run.idle_rss / MIB:.0f} MiB, peak {run.peak_rss / MIB:.0f} MiB"
        print(f"memory {run.system}: {summary}", file=sys.stderr)
        runs.append(run)
    return runs


def _jobs(system: System, wanted: int) -> int:
    """``wanted``, or for a system whose drains are capped (it runs a few hundred jobs/s),
    ten times its cap: enough to tell a leak, in about a minute and a half."""
    return min(wanted, 10 * system.max_jobs) if system.max_jobs else wanted


def measure(
    system: System,
    server: RedisServer,
    jobs: int,
    workdir: Path,
    concurrency: int = 10,
    idle_s: float = IDLE_S,
) -> MemoryRun:
    """One worker, one warm-up job, ``idle_s`` idle, then ``jobs`` in ``CHUNKS`` drained chunks."""
    result = MemoryRun(system.name, jobs, concurrency)
    marker = workdir / f"memory-marker-{system.name}-{concurrency}"
    marker.write_bytes(b"")
    log = workdir / f"memory-worker-{system.name}-{concurrency}.log"
    enqueue_log = workdir / f"memory-enqueue-{system.name}-{concurrency}.log"
    with server.client() as conn:
        conn.flushall()
    spawned = time.monotonic()
    try:
        worker = procs.spawn(
            system.worker_argv(concurrency), env=system.env(server.url, marker), cwd=system.cwd, log=log
        )
    except OSError as exc:
        result.error = f"worker did not start: {exc}"
        return result
    watch = _Watch(result, worker, marker)
    enqueuer: subprocess.Popen[bytes] | None = None
    try:
        enqueuer = _enqueue(system, server, 1, 1, enqueue_log)
        watch.until(1, enqueuer, enqueue_log, MIN_TIMEOUT)
        time.sleep(idle_s)
        idle = watch.sample()
        result.idle_rss, result.idle_pss = idle.rss, idle.pss
        chunk = math.ceil(jobs / CHUNKS)
        done = 0
        while done < jobs:
            count = min(chunk, jobs - done)
            enqueuer = _enqueue(system, server, count, BATCH, enqueue_log)
            watch.until(1 + done + count, enqueuer, enqueue_log, max(MIN_TIMEOUT, count / 50))
            done += count
            s = watch.settled(idle.processes)
            result.checkpoints.append(Checkpoint(done, s.rss, s.pss))
        result.seconds = time.monotonic() - spawned
    except (RuntimeError, OSError) as exc:
        result.error = f"{exc}; worker log tail: {procs.log_tail(log)}"
    finally:
        if enqueuer is not None and enqueuer.poll() is None:
            procs.stop(enqueuer, grace=5)
        procs.stop(worker, grace=STOP_GRACE)
    ran = marker.stat().st_size - 1
    if ran != jobs and not result.error:
        result.error = f"{ran} jobs ran, expected {jobs}"
    return result


def _mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def table(runs: list[MemoryRun]) -> list[str]:
    """One row per run: RSS idle, halfway and at the end, growth over the second half, peaks."""
    lines = [
        "| system | concurrency | N | idle RSS MiB | RSS after N/2 | RSS after N | growth N/2 → N MiB "
        "| peak RSS (PSS) MiB, worker tree | peak RSS MiB, worker process | run s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        mid = r.halfway
        if r.error or mid is None:
            lines.append(f"| {r.system} | {r.concurrency} | {r.jobs} | failed | | | | | | |")
            continue
        lines.append(
            f"| {r.system} | {r.concurrency} | {r.jobs} | {_mib(r.idle_rss)} | {_mib(mid.rss)} "
            f"| {_mib(r.checkpoints[-1].rss)} | **{r.growth / MIB:+.1f}** "
            f"| {_mib(r.peak_rss)} ({_mib(r.peak_pss)}) | {_mib(r.peak_main_rss)} | {r.seconds:.0f} |"
        )
    return lines


METHOD = f"""\
- One worker process per system on the private Redis (FLUSHALLed first). It runs one no-op
  job (so that it is ready and has imported what a job needs), then idles {IDLE_S:.0f} s:
  *idle RSS* is sampled then.
- The N jobs are then pushed with the system's bulk call ({BATCH} per call) in {CHUNKS} chunks,
  each only after the previous chunk has run (the marker file says so), so Redis never holds
  more than one chunk. RSS is recorded after each chunk; the table shows it halfway and at
  the end. *Growth N/2 → N* is the leak figure: the first half includes warm-up.
- RSS and PSS are summed over the worker's process tree (psutil, `/proc/PID/smaps_rollup`).
  Checkpoints wait (up to {SETTLE_S:.0f} s) for the tree to be back to the processes it had at idle,
  so that a fork-per-job child (RQ) is not caught. The peak is sampled every
  {MEMORY_SAMPLE * 1000:.0f} ms and does include such children, whose RSS counts pages shared
  with the parent twice: PSS, and the peak of the worker process alone, are the figures to
  compare there. For single-process workers all three agree.
"""


TITLE = "Memory: worker RSS idle and after many jobs"
JSON_FILE = "memory.json"


def tables(runs: list[MemoryRun]) -> str:
    return document.section(TITLE, table(runs))


def write(runs: list[MemoryRun], settings: dict[str, Any], out_dir: Path) -> None:
    data = {"settings": settings, "runs": [asdict(r) for r in runs]}
    document.write_section(
        out_dir, TITLE, document.section(TITLE, [METHOD, "", *table(runs)]), JSON_FILE, data
    )
