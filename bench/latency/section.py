"""Latency from enqueue to start at a steady rate: one worker, jobs sent one by one, paced.

Each latency job carries ``time.time()`` taken by the enqueuer just before its push, and
appends one 16-byte record to the marker file: ``time.time()`` at its start minus that, in
ms. Enqueuer and worker run on this machine, so both read the same clock.

A run: FLUSHALL, spawn the worker, wait until it has run one no-op job (it is then fetching,
idle, as a worker waiting for traffic is), run the system's paced enqueuer to the end, wait
for every record, stop the worker. The bench sends Redis nothing meanwhile and reads the
marker only after the enqueuer exited, so it takes no CPU from the two being measured.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.core import document, procs
from bench.core.fmt import fixed, rate, spread
from bench.core.redis_server import RedisServer
from bench.core.system import System, only
from bench.core.timing import STOP_GRACE

#: Size of one latency record: ``b"%15.6f\n"``.
RECORD = 16
#: Seconds a worker gets to start and run its first job.
READY_TIMEOUT = 60.0
#: Seconds a worker gets, after the enqueuer ended, to start the jobs still queued.
DRAIN_TIMEOUT = 60.0
POLL = 0.01
#: Percentiles of the table, in percent.
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


@dataclass
class LatencyRun:
    system: str
    #: Asked rate, jobs/s.
    rate: float
    jobs: int
    #: The enqueuer's own timing, from just before its first send to after its last one.
    enqueue_seconds: float = 0.0
    #: Enqueue-to-start of every job, ms, in the order they started.
    samples_ms: list[float] = field(default_factory=list)
    concurrency: int = 0
    #: 1-minute load average when the enqueuer ended (other work on the machine shows here).
    load_avg: float = 0.0
    error: str = ""

    @property
    def achieved_rate(self) -> float:
        return self.jobs / self.enqueue_seconds if self.enqueue_seconds > 0 else 0.0

    def percentile(self, q: float) -> float:
        """Nearest rank: the smallest sample with at least ``q`` percent of all samples at or
        below it (no interpolation, so it is always a latency that was observed)."""
        data = sorted(self.samples_ms)
        if not data:
            return math.nan
        # Rounded first: 99.9 / 100 * 10000 is 9990.000000000002 in floats, which would
        # take the next rank.
        return data[max(1, math.ceil(round(q * len(data) / 100, 9))) - 1]

    def to_json(self) -> dict[str, Any]:
        ok = bool(self.samples_ms)
        return {
            **asdict(self),
            "achieved_rate": self.achieved_rate,
            "percentiles_ms": {f"p{q:g}": self.percentile(q) for q in PERCENTILES} if ok else {},
            "max_ms": max(self.samples_ms) if ok else None,
        }


def run(
    settings: dict[str, Any], systems: list[System], server: RedisServer, workdir: Path
) -> list[LatencyRun]:
    """Every system of the settings in turn, in each repetition."""
    s = settings
    runs = []
    for rep in range(s["reps"]):
        for system in only(systems, s["systems"]):
            run = measure(system, server, system.jobs(s["jobs"]), s["rate"], workdir, s["concurrency"])
            runs.append(run)
            summary = run.error or f"p50 {run.percentile(50):.2f} ms, p99 {run.percentile(99):.2f} ms"
            print(f"rep {rep + 1}/{s['reps']} latency {system.name}: {summary}", file=sys.stderr)
    return runs


def measure(
    system: System, server: RedisServer, jobs: int, rate: float, workdir: Path, concurrency: int = 10
) -> LatencyRun:
    """One latency run of ``system``; a failure goes into ``error``, it is never raised."""
    result = LatencyRun(system.name, rate, jobs, concurrency=concurrency)
    label = f"{system.name}-latency-{rate:g}".replace(" ", "_")
    marker = workdir / f"marker-{label}"
    marker.write_bytes(b"")
    log = workdir / f"worker-{label}.log"
    with server.client() as conn:
        conn.flushall()
    worker = procs.spawn(
        system.worker_argv(concurrency), env=system.env(server.url, marker), cwd=system.cwd, log=log
    )
    try:
        _enqueue(system.enqueue_argv(server.url, "bulk", 1, 1), system, server)
        _wait(marker, 1, worker, READY_TIMEOUT, "the worker to run its first job")
        seconds = _enqueue(system.latency_argv(server.url, jobs, rate), system, server, jobs / rate)
        result.enqueue_seconds = seconds
        result.load_avg = os.getloadavg()[0]
        _wait(marker, 1 + RECORD * jobs, worker, DRAIN_TIMEOUT, f"{jobs} latency jobs")
    # LookupError and ValueError: an enqueuer that printed no, or no valid, JSON line.
    except (RuntimeError, OSError, LookupError, ValueError, subprocess.SubprocessError) as exc:
        result.error = f"{exc}; log tail: {procs.log_tail(log)}"
    finally:
        procs.stop(worker, grace=STOP_GRACE)
    if not result.error:
        data = marker.read_bytes()[1:]
        if len(data) != RECORD * jobs:
            result.error = f"{len(data)} bytes of records after the worker stopped, expected {RECORD * jobs}"
        else:
            result.samples_ms = [float(data[i : i + RECORD]) for i in range(0, len(data), RECORD)]
    return result


def _enqueue(argv: list[str], system: System, server: RedisServer, expected_s: float = 0.0) -> float:
    """Run an enqueuer to the end; return the seconds it reports."""
    out = subprocess.run(
        argv,
        env=system.env(server.url, None),
        cwd=system.cwd,
        capture_output=True,
        text=True,
        timeout=2 * expected_s + 60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"enqueue {' '.join(argv[-3:])} failed ({out.returncode}): {out.stderr[-1500:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def _wait(marker: Path, size: int, worker: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    """Poll until ``marker`` holds ``size`` bytes."""
    deadline = time.monotonic() + timeout
    while (done := marker.stat().st_size) < size:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.returncode} waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what} ({done} of {size} bytes)")
        time.sleep(POLL)


def table(runs: list[LatencyRun]) -> list[str]:
    """Per system and asked rate: each figure is the median over the runs (repetitions) of that
    run's own figure, with (min-max); samples are not pooled across runs."""
    groups: dict[tuple[str, float], list[LatencyRun]] = defaultdict(list)
    for r in runs:
        groups[(r.system, r.rate)].append(r)
    heads = " | ".join(f"p{q:g} ms" for q in PERCENTILES)
    lines = [
        f"| system | concurrency | N | asked jobs/s | achieved jobs/s | {heads} | max ms |",
        "|---|---|---|---|---|" + "---|" * (len(PERCENTILES) + 1),
    ]
    ms = fixed(2)
    for (system, asked), group in groups.items():
        ok = [r for r in group if not r.error]
        head = f"| {system} | {group[0].concurrency} | {group[0].jobs} | {rate(asked)}"
        if not ok:
            lines.append(f"{head} | failed |" + " |" * (len(PERCENTILES) + 1))
            continue
        cells = [spread((r.percentile(q) for r in ok), ms) for q in PERCENTILES]
        cells.append(spread((max(r.samples_ms) for r in ok), ms))
        lines.append(f"{head} | {spread((r.achieved_rate for r in ok), rate)} | " + " | ".join(cells) + " |")
    return lines


TITLE = "Latency: enqueue to start"
JSON_FILE = "latency.json"
METHOD = [
    "One worker process per system (10 job slots), idle and warm: the bench waits for one no-op",
    "job to run first. The system's own client then enqueues latency jobs one call at a time,",
    "paced at a steady rate; each job's argument is `time.time()` at its enqueue and the job",
    "appends `time.time()` minus that, at its start, to the marker file. Same clock, same machine.",
    "Percentiles of each run; median of the repetitions with (min-max). A system that drains",
    "fewer jobs per second than the rate builds a backlog, so its latency is queueing time;",
    "those systems send only their capped N (see the runtime section) to keep the run short.",
]


def tables(runs: list[LatencyRun]) -> str:
    return document.section(TITLE, table(runs))


def write(runs: list[LatencyRun], settings: dict[str, Any], out_dir: Path) -> None:
    data = {"settings": settings, "runs": [r.to_json() for r in runs]}
    document.write_section(
        out_dir, TITLE, document.section(TITLE, [*METHOD, "", *table(runs)]), JSON_FILE, data
    )
