"""The periodic section: what running many schedules costs the workers, and how late their ticks
are enqueued.

For each broker (Redis, PostgreSQL) and repetition, two runs of the same worker processes
(``python -m asynctask worker -r bench/periodic/jobs.py -q default``), each from an empty broker:

- ``baseline``: the job module declares no schedule, so the workers only wait for jobs;
- ``scheduled``: it declares S schedules of one no-op job, every second (``* * * * * *``),
  whose jobs go to a queue that no worker serves: the workers' CPU is the scheduling's.

Each run waits until every process has started (and, with schedules, made its first
declaration), then measures a window of N whole seconds that starts at most half a second
before then; its ticks are the N seconds that end it. The workers' CPU and the server's are
read half a second after the window's start and after its end: between two ticks' passes, so
that the passes of the window's ticks fall inside. The queue's length is sampled every
``SAMPLE_EVERY`` seconds from the window's start until every schedule has taken the window's
last tick. The workers are then stopped and the queued jobs read straight from the store, in
push order: every (schedule, tick) of the window must be there exactly once. Each job's lag is
measured from outside (the first sample that shows it in the queue, minus its tick), which
counts the whole take; its payload's ``enqueued_at - periodic_at`` only shows that no job was
stamped before its tick (the scheduler builds the jobs ahead and stamps them with the tick).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import redis

from asynctask.keys import Keys
from bench.core import procs
from bench.core.drain import RUN_ERRORS, BenchBroker, one_line, open_brokers, postgres_cpu
from bench.core.fmt import percentile
from bench.core.redis_server import RedisServer
from bench.core.results import PACKAGES, SectionResults, section_frame
from bench.core.system import ROOT, clean_env
from bench.core.timing import STOP_GRACE
from bench.periodic.jobs import NAME_PREFIX

JOBS_MODULE = "bench/periodic/jobs.py"
BASELINE = "baseline"
SCHEDULED = "scheduled"
#: The queue the schedules push to; the workers serve ``default`` only.
QUEUE = "periodic"
#: Seconds between two samples of the queue's length.
SAMPLE_EVERY = 0.01
#: Seconds after a whole second at which the CPU is read: between two ticks' passes.
OFFSET = 0.5


def order(rep: int, baseline: bool = True) -> list[str]:
    """The runs of repetition ``rep``: reversed every other one, so that a drift of the
    machine's load falls on both alike; without ``baseline``, the scheduled run alone."""
    runs = [BASELINE, SCHEDULED] if baseline else [SCHEDULED]
    return runs if rep % 2 == 0 else runs[::-1]


def wait_limit(schedules: int) -> float:
    """Seconds a run may wait for the first declarations, or for the window's last tick to be
    taken: a worker's declaration grows with its schedules."""
    return 60.0 + 0.1 * schedules


@dataclass
class Lag:
    """Percentiles of a run's lags, in milliseconds."""

    p50: float = 0.0
    p99: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, values: list[float]) -> Lag:
        return cls(percentile(values, 50), percentile(values, 99), max(values, default=0.0))


@dataclass
class PeriodicRun:
    backend: str
    case: str
    schedules: int
    processes: int
    concurrency: int
    seconds: int
    #: Spawn -> every process started (and made its first declaration, with schedules).
    ready_s: float = 0.0
    #: The window's ticks are ``window_start + 1`` ... ``window_start + seconds``.
    window_start: int = 0
    #: CPU seconds of each worker process tree over the window.
    worker_cpu_s: list[float] = field(default_factory=list)
    #: CPU seconds of redis-server, or of the PostgreSQL backends serving the database.
    server_cpu_s: float = 0.0
    #: The window's end (+ OFFSET) -> every schedule took its last tick.
    tail_s: float = 0.0
    jobs: int = 0
    #: Distinct ``enqueued_at`` among the window's jobs: the passes that pushed them.
    pushes: int = 0
    enqueued_lag: Lag = field(default_factory=Lag)
    visible_lag: Lag = field(default_factory=Lag)
    checks: dict[str, int] = field(default_factory=dict)
    load_before: float = 0.0
    error: str = ""

    def cpu_pct(self) -> list[float]:
        """Each process's CPU over the window, in % of one core."""
        return [cpu / self.seconds * 100 for cpu in self.worker_cpu_s]

    def mean_cpu_pct(self) -> float:
        pct = self.cpu_pct()
        return sum(pct) / len(pct) if pct else 0.0

    def server_cpu_pct(self) -> float:
        return self.server_cpu_s / self.seconds * 100


@dataclass
class PeriodicResults(SectionResults[PeriodicRun]):
    """The periodic-jobs section's results."""


class Probe:
    """What a run reads of its broker while the workers run and after: the queue's length (a
    push position on Redis, the last row id on SQL), the schedulers and ticks taken, the jobs."""

    def __init__(self, broker: BenchBroker) -> None:
        self.broker = broker
        self.keys = Keys()
        self.base = f"{self.keys.prefix}asynctask:periodic:"
        self._redis: redis.Redis | None = None
        self._pg: psycopg.Connection[Any] | None = None
        self._redis_proc: psutil.Process | None = None
        if broker.redis_server is not None:
            self._redis = broker.redis_server.client()
            self._redis_proc = psutil.Process(broker.redis_server.pid)
        else:
            self._pg = psycopg.connect(broker.url, autocommit=True)

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
        if self._pg is not None:
            self._pg.close()

    def _one(self, statement: str) -> Any:
        assert self._pg is not None
        row = self._pg.execute(statement).fetchone()
        return row[0] if row else None

    def queued(self) -> int:
        """Redis: the queue list's length; SQL: the highest job id (rows are numbered from 1
        in push order after each TRUNCATE)."""
        if self._redis is not None:
            return int(self._redis.llen(self.keys.queue(QUEUE)))
        return int(self._one("SELECT coalesce(max(id), 0) FROM asynctask_job"))

    def schedulers(self) -> int:
        if self._redis is not None:
            return int(self._redis.zcard(self.base + "schedulers"))
        return int(self._one("SELECT count(*) FROM asynctask_periodic_scheduler"))

    def taken_up_to(self, schedules: int) -> int | None:
        """The tick every one of the ``schedules`` has taken (None until each has one)."""
        if self._redis is not None:
            lasts = [int(v) for v in self._redis.hvals(self.base + "last")]
        else:
            assert self._pg is not None
            rows = self._pg.execute("SELECT last FROM asynctask_periodic WHERE last IS NOT NULL")
            lasts = [int(r[0]) for r in rows]
        return min(lasts) if len(lasts) >= schedules else None

    def jobs(self) -> list[tuple[int, dict[str, Any]]]:
        """The queued jobs with their push position (Redis: from 1; SQL: the row id), in push order."""
        if self._redis is not None:
            newest_first = self._redis.lrange(self.keys.queue(QUEUE), 0, -1)
            return [(i + 1, json.loads(raw)) for i, raw in enumerate(reversed(newest_first))]
        assert self._pg is not None
        rows = self._pg.execute("SELECT id, payload FROM asynctask_job WHERE queue = %s ORDER BY id", [QUEUE])
        return [(int(i), json.loads(body)) for i, body in rows]

    def server_cpu(self) -> dict[int, float]:
        if self._redis_proc is not None:
            times = self._redis_proc.cpu_times()
            return {self._redis_proc.pid: times.user + times.system}
        return postgres_cpu(self.broker.postgres)


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> PeriodicResults:
    results = PeriodicResults(settings)
    with section_frame(results, (*PACKAGES, "cronsim")) as stack:
        brokers = open_brokers(results, pg_url, server, stack, "periodic", settings["backends"])
        for rep in range(settings["reps"]):
            for broker in brokers:
                for case in order(rep, settings["baseline"]):
                    _one(results, broker, case, rep, workdir)
    return results


def _one(results: PeriodicResults, broker: BenchBroker, case: str, rep: int, workdir: Path) -> None:
    s = results.settings
    schedules = s["schedules"] if case == SCHEDULED else 0
    one = PeriodicRun(broker.backend, case, schedules, s["processes"], s["concurrency"], s["seconds"])
    label = f"periodic-{broker.backend}-{case}-r{rep}"
    probe: Probe | None = None
    try:
        broker.empty()
        probe = Probe(broker)
        one.load_before = os.getloadavg()[0]
        samples = _observe(one, broker, probe, [workdir / f"{label}-{i}.log" for i in range(one.processes)])
        if schedules:
            check(one, probe.jobs(), samples)
        elif (left := probe.queued()) != 0:
            one.error = f"{left} jobs queued without a schedule"
    except RUN_ERRORS as exc:
        one.error = one.error or one_line(exc)
    finally:
        if probe is not None:
            probe.close()
    results.runs.append((rep, one))
    _say(rep, s["reps"], one)


def _observe(
    one: PeriodicRun, broker: BenchBroker, probe: Probe, logs: list[Path]
) -> list[tuple[float, int]]:
    """Spawn the workers, wait until they are ready, measure the window, wait for its last tick
    to be taken; stop them. Returns the (epoch time, queued) samples from the window's start."""
    env = clean_env(
        PYTHONPATH=str(ROOT),
        ASYNCTASK_TRACKING="false",
        BENCH_PERIODIC_SCHEDULES=str(one.schedules),
        BENCH_PERIODIC_QUEUE=QUEUE,
    )
    argv = [
        sys.executable, "-m", "asynctask", "worker", "--broker", broker.url,
        "-r", JOBS_MODULE, "-c", str(one.concurrency), "-q", "default",
    ]  # fmt: skip
    workers: list[subprocess.Popen[bytes]] = []
    samples: list[tuple[float, int]] = []
    spawned = time.monotonic()
    limit = wait_limit(one.schedules)

    def alive() -> None:
        for worker, log in zip(workers, logs, strict=True):
            if worker.poll() is not None:
                raise RuntimeError(f"a worker exited with {worker.returncode}: {procs.log_tail(log)}")

    def ready() -> bool:
        started = all(_started(log) for log in logs)
        return started and (not one.schedules or probe.schedulers() >= one.processes)

    def sample_until(done: Callable[[], bool], what: str, within: float) -> None:
        deadline = time.monotonic() + within
        while not done():
            alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {within:.0f} s waiting for {what}")
            samples.append((time.time(), probe.queued()))
            time.sleep(SAMPLE_EVERY)

    def cpu() -> tuple[list[float], dict[int, float]]:
        return [procs.tree_usage(w.pid, memory=False).cpu for w in workers], probe.server_cpu()

    try:
        workers = [procs.spawn(argv, env=env, cwd=ROOT, log=log) for log in logs]
        deadline = spawned + limit
        while not ready():
            alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {limit:.0f} s waiting for the workers to start")
            time.sleep(0.05)
        one.ready_s = time.monotonic() - spawned
        one.window_start = math.ceil(time.time() - OFFSET)
        end = one.window_start + one.seconds
        _sleep_until(one.window_start + OFFSET)
        cpu_first, server_first = cpu()
        sample_until(lambda: time.time() >= end + OFFSET, "the window's end", one.seconds + limit)
        cpu_last, server_last = cpu()
        one.worker_cpu_s = [b - a for a, b in zip(cpu_first, cpu_last, strict=True)]
        one.server_cpu_s = sum(c - server_first.get(pid, 0.0) for pid, c in server_last.items())
        if one.schedules:
            tail = time.monotonic()
            sample_until(lambda: _taken(probe, one.schedules, end), "the window's last tick", limit)
            samples.append((time.time(), probe.queued()))
            one.tail_s = time.monotonic() - tail
        return samples
    finally:
        procs.stop_all(workers, grace=STOP_GRACE)


def _taken(probe: Probe, schedules: int, tick: int) -> bool:
    return (probe.taken_up_to(schedules) or 0) >= tick


def _started(log: Path) -> bool:
    try:
        return "worker started" in log.read_text(errors="replace")
    except OSError:
        return False


def _sleep_until(epoch: float) -> None:
    time.sleep(max(0.0, epoch - time.time()))


def check(one: PeriodicRun, jobs: list[tuple[int, dict[str, Any]]], samples: list[tuple[float, int]]) -> None:
    """The window's jobs: each (schedule, tick) once, and their lags."""
    first, last = one.window_start + 1, one.window_start + one.seconds
    names = {f"{NAME_PREFIX}{i}" for i in range(one.schedules)}
    seen: Counter[tuple[str, int]] = Counter()
    enqueued, visible, stamps = [], [], set()
    at = iter(samples)
    sample = next(at, None)
    for position, job in jobs:
        tick = int(job.get("periodic_at", 0))
        # A job past the samples (none expected) would otherwise end the lag's count early.
        while sample is not None and sample[1] < position:
            sample = next(at, None)
        if not first <= tick <= last:
            continue
        seen[(str(job.get("periodic")), tick)] += 1
        enqueued.append((float(job["enqueued_at"]) - tick) * 1000)
        stamps.add(job["enqueued_at"])
        if sample is not None:
            visible.append((sample[0] - tick) * 1000)
    expected = {(name, tick) for name in names for tick in range(first, last + 1)}
    one.jobs = sum(seen.values())
    one.pushes = len(stamps)
    one.enqueued_lag, one.visible_lag = Lag.of(enqueued), Lag.of(visible)
    one.checks = {
        "expected": len(expected),
        "missing": len(expected - seen.keys()),
        "doubled": sum(n - 1 for n in seen.values() if n > 1),
        "unknown": sum(n for key, n in seen.items() if key not in expected),
        "unseen": len(enqueued) - len(visible),
    }
    failed = {k: v for k, v in one.checks.items() if k != "expected" and v}
    if failed and not one.error:
        found = ", ".join(f"{k} {v}" for k, v in failed.items())
        one.error = f"of {len(expected)} (schedule, tick) pairs in the window: {found}"


def _say(rep: int, reps: int, one: PeriodicRun) -> None:
    label = f"rep {rep + 1}/{reps} periodic {one.case} on {one.backend}, {one.schedules} schedules"
    if one.error:
        print(f"{label}: FAILED: {one.error[-300:]}", file=sys.stderr)
        return
    cpu = ", ".join(f"{pct:.1f}" for pct in one.cpu_pct())
    lag = (
        f"; {one.jobs:,} jobs, lag p50 {one.enqueued_lag.p50:.0f} / p99 {one.enqueued_lag.p99:.0f} ms, "
        f"in the queue p99 {one.visible_lag.p99:.0f} ms"
        if one.schedules
        else ""
    )
    print(
        f"{label}: ready in {one.ready_s:.1f} s, worker CPU {cpu} % of a core over {one.seconds} s{lag}",
        file=sys.stderr,
    )
