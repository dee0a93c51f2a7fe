"""One measurement at a time: an enqueue pass, or enqueue then process with 1..n worker processes.

Processing is timed from the outside, the same way for every system: every job appends one
byte to a marker file, and the runner polls its size every 2 ms. The runner sends Redis
nothing while a worker runs except one INFO before the spawn and one after the last job,
so the command counts are the worker's own.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench.core import procs
from bench.core.redis_server import RedisServer
from bench.core.system import System
from bench.core.timing import MEMORY_SAMPLE, STOP_GRACE, DrainRates, drain_timeout, poll_marker


@dataclass
class EnqueueRun:
    system: str
    mode: str
    jobs: int
    seconds: float
    redis_cmds: int
    #: How late a 1 ms timer on the enqueuer's event loop woke at most (pushes from coroutines).
    stall_ms: float | None = None

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


@dataclass
class ProcessRun(DrainRates):
    system: str
    concurrency: int
    jobs: int
    enqueue: EnqueueRun
    processes: int = 1
    startup_s: float = 0.0  # spawn -> first job done
    steady_s: float = 0.0  # first job done -> last job done
    total_s: float = 0.0  # spawn -> last job done
    peak_rss: int = 0
    peak_pss: int = 0
    #: The largest single worker process tree (``peak_rss`` sums all workers).
    peak_worker_rss: int = 0
    #: Worker tree between first and last job done (CPU, context switches).
    worker_steady: procs.TreeUsage = field(default_factory=procs.TreeUsage)
    #: Worker tree from spawn to last job done, start-up included.
    worker_total: procs.TreeUsage = field(default_factory=procs.TreeUsage)
    redis_steady: procs.TreeUsage = field(default_factory=procs.TreeUsage)
    redis_cmds: int = 0
    cmdstats: dict[str, int] = field(default_factory=dict)
    stop_s: float = 0.0
    checks: dict[str, int] = field(default_factory=dict)
    error: str = ""


def enqueue(system: System, server: RedisServer, mode: str, jobs: int, batch: int = 1000) -> EnqueueRun:
    """Run the system's enqueuer in a fresh process against an empty Redis."""
    with server.client() as conn:
        conn.flushall()
        before = _commands(conn)
        out = subprocess.run(
            system.enqueue_argv(server.url, mode, jobs, batch),
            env=system.env(server.url, None),
            cwd=system.cwd,
            capture_output=True,
            text=True,
            timeout=600,
        )
        after = _commands(conn)
    if out.returncode != 0:
        raise RuntimeError(f"{system.name} enqueue failed ({out.returncode}): {out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    with server.client() as conn:
        queued = system.queued(conn)
    if int(result["jobs"]) != jobs or queued != jobs:
        raise RuntimeError(f"{system.name} enqueue: asked {jobs}, reported {result['jobs']}, queued {queued}")
    return EnqueueRun(
        system.name,
        mode,
        jobs,
        float(result["seconds"]),
        sum(after.values()) - sum(before.values()),
        result.get("stall_ms"),
    )


def process(
    system: System, server: RedisServer, concurrency: int, jobs: int, workdir: Path, processes: int = 1
) -> ProcessRun:
    """Enqueue ``jobs`` with the bulk call, then start ``processes`` workers and time them
    until all have run."""
    run = ProcessRun(
        system.name, concurrency, jobs, enqueue(system, server, "bulk", jobs), processes=processes
    )
    label = f"{system.name}-{processes}x{concurrency}".replace(" ", "_")
    marker = workdir / f"marker-{label}"
    marker.write_bytes(b"")
    log = workdir / f"worker-{label}.log"
    with server.client() as conn:
        before = _commands(conn)
        spawned = time.monotonic()
        workers = [
            procs.spawn(
                system.worker_argv(concurrency), env=system.env(server.url, marker), cwd=system.cwd, log=log
            )
            for _ in range(processes)
        ]
        try:
            _watch(run, workers, marker, server.pid, spawned, timeout=drain_timeout(jobs))
            after = _commands(conn)
            run.redis_cmds = sum(after.values()) - sum(before.values())
            run.cmdstats = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        except RuntimeError as exc:
            run.error = f"{exc}; log tail: {procs.log_tail(log)}"
        finally:
            run.stop_s = max(procs.stop(worker, grace=STOP_GRACE) for worker in workers)
    run.checks = _checks(system, server, marker)
    if run.checks["marker_bytes"] != jobs and not run.error:
        run.error = f"{run.checks['marker_bytes']} jobs ran, expected {jobs}"
    elif run.checks["queued_left"] and not run.error:
        run.error = f"{run.checks['queued_left']} jobs still queued after all ran"
    return run


def _usage(workers: list[subprocess.Popen[bytes]], *, memory: bool) -> tuple[procs.TreeUsage, int]:
    """The workers' summed usage, and the largest single worker tree's RSS."""
    total, largest = procs.TreeUsage(), 0
    for worker in workers:
        usage = procs.tree_usage(worker.pid, memory=memory)
        total = total + usage
        largest = max(largest, usage.rss)
    return total, largest


def _watch(
    run: ProcessRun,
    workers: list[subprocess.Popen[bytes]],
    marker: Path,
    redis_pid: int,
    spawned: float,
    timeout: float,
) -> None:
    """Poll the marker until ``run.jobs`` bytes; fill in timings, CPU and peak memory."""
    worker_first = redis_first = procs.TreeUsage()
    next_memory = spawned
    for poll in poll_marker(marker, run.jobs):
        if poll.started:
            worker_first, _ = _usage(workers, memory=False)
            redis_first = procs.tree_usage(redis_pid, memory=False)
        if poll.last:
            worker_last, largest = _usage(workers, memory=True)
            run.redis_steady = procs.tree_usage(redis_pid, memory=False) - redis_first
            run.worker_steady = worker_last - worker_first
            run.worker_total = worker_last
            run.peak_rss = max(run.peak_rss, worker_last.rss)
            run.peak_pss = max(run.peak_pss, worker_last.pss)
            run.peak_worker_rss = max(run.peak_worker_rss, largest)
            first, now = poll.first, poll.now
            run.startup_s, run.steady_s, run.total_s = first - spawned, now - first, now - spawned
            return
        if poll.now >= next_memory:
            usage, largest = _usage(workers, memory=True)
            run.peak_rss, run.peak_pss = max(run.peak_rss, usage.rss), max(run.peak_pss, usage.pss)
            run.peak_worker_rss = max(run.peak_worker_rss, largest)
            next_memory = poll.now + MEMORY_SAMPLE
        for worker in workers:
            if worker.poll() is not None:
                raise RuntimeError(f"a worker exited with {worker.returncode} after {poll.done} jobs")
        if poll.now - spawned > timeout:
            raise RuntimeError(f"timed out after {timeout:.0f} s with {poll.done} of {run.jobs} jobs done")


def _checks(system: System, server: RedisServer, marker: Path) -> dict[str, int]:
    """After the workers stopped: nothing left queued or in flight, each job run exactly once."""
    with server.client() as conn:
        checks = {"marker_bytes": marker.stat().st_size, "queued_left": system.queued(conn)}
        if system.inflight_pattern:
            checks["inflight_left"] = sum(
                int(conn.llen(key)) for key in conn.scan_iter(match=system.inflight_pattern)
            )
        if system.processed_stat:
            checks["stat_processed"] = int(conn.get("stat:processed") or 0)
        return checks


def _commands(conn: redis.Redis) -> dict[str, int]:
    """Calls per command since start (INFO commandstats; includes commands run inside Lua).

    The bench's own INFO calls are left out: they are the only commands it sends mid-run.
    """
    info: dict[str, Any] = conn.info("commandstats")
    calls = {key.removeprefix("cmdstat_"): int(value["calls"]) for key, value in info.items()}
    calls.pop("info", None)
    return calls
