"""``python -m bench.replicas``: what ``redis_min_replicas=1`` costs, on a private master and
its replica (both throw-away servers of the bench, never the shared one).

Each repetition measures both settings, in an order reversed every other repetition:

- push: ``Client.push`` of the no-op job, one call after another: calls per second, and the
  p50 and p99 of one call;
- latency: one idle worker (1 x 10) and latency jobs pushed one at a time, ``PACE`` apart: the
  p50 and p99 from enqueue to start;
- drain: jobs pushed in bulk, then drained by one worker (1 x 10): jobs per second from the
  first job done to the last (the worker's start-up left out).

Master, replica, worker and client share this machine: a replica's acknowledgement costs a
loopback round trip here, and a network round trip more per write where it is on another host.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from asynctask import Client, Settings
from bench.core import procs
from bench.core.fmt import fixed, percentile, rate, ratio, spread, table
from bench.core.noop_jobs import LATENCY_NAME, NAME
from bench.core.redis_server import RedisServer
from bench.core.system import ROOT
from bench.core.timing import STOP_GRACE, drain_timeout, poll_marker
from bench.runtime.asynctask_system import AsyncTask

#: Seconds between two latency jobs: the worker is idle when each comes.
PACE = 0.005
#: Seconds a worker gets to start and run its first job.
READY_TIMEOUT = 60.0
#: Bytes of one latency record (``noop_jobs.latency_job``).
RECORD = 16


@dataclass
class Figures:
    """One setting's measurements, a value per repetition."""

    push_rate: list[float] = field(default_factory=list)
    push_p50_us: list[float] = field(default_factory=list)
    push_p99_us: list[float] = field(default_factory=list)
    latency_p50_ms: list[float] = field(default_factory=list)
    latency_p99_ms: list[float] = field(default_factory=list)
    drain_rate: list[float] = field(default_factory=list)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--pushes", type=int, default=5000, help="push calls timed per repetition")
    parser.add_argument("--latency", type=int, default=1000, help="latency jobs per repetition")
    parser.add_argument("--jobs", type=int, default=40000, help="jobs drained per repetition")
    args = parser.parse_args(argv)
    figures = {0: Figures(), 1: Figures()}
    with tempfile.TemporaryDirectory(prefix="bench-replicas-") as tmp:
        root = Path(tmp)
        (root / "master").mkdir()
        (root / "replica").mkdir()
        with RedisServer(root / "master") as master, RedisServer(root / "replica") as replica:
            _replicate(master, replica)
            for rep in range(args.reps):
                for replicas in (0, 1) if rep % 2 == 0 else (1, 0):
                    settings = Settings(redis_url=master.url, redis_min_replicas=replicas, tracking=False)
                    found = figures[replicas]
                    _flush(master)
                    _push(settings, args.pushes, found)
                    _flush(master)
                    _latency(settings, args.latency, root, found)
                    _flush(master)
                    _drain(settings, args.jobs, root, found)
                    print(
                        f"rep {rep + 1}/{args.reps} redis_min_replicas={replicas}: push "
                        f"{found.push_rate[-1]:,.0f}/s, latency p50 {found.latency_p50_ms[-1]:.2f} ms, "
                        f"drain {found.drain_rate[-1]:,.0f} jobs/s",
                        flush=True,
                    )
    print("\n".join(_report(figures)))


def _replicate(master: RedisServer, replica: RedisServer) -> None:
    with replica.client() as client:
        client.replicaof("127.0.0.1", master.port)
        deadline = time.monotonic() + READY_TIMEOUT
        while client.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not sync")
            time.sleep(0.05)


def _flush(master: RedisServer) -> None:
    with master.client() as client:
        client.flushall()
        # WAIT for the flush itself: the next measurement starts with the replica caught up.
        client.execute_command("WAIT", 1, 5000)


def _push(settings: Settings, pushes: int, found: Figures) -> None:
    client = Client(settings)
    try:
        client.push({"class": NAME, "args": []})
        took: list[float] = []
        began = time.perf_counter()
        for _ in range(pushes):
            start = time.perf_counter()
            client.push({"class": NAME, "args": []})
            took.append(time.perf_counter() - start)
        elapsed = time.perf_counter() - began
    finally:
        client.close()
    found.push_rate.append(pushes / elapsed)
    found.push_p50_us.append(percentile(took, 50) * 1e6)
    found.push_p99_us.append(percentile(took, 99) * 1e6)


def _worker(settings: Settings, marker: Path, root: Path) -> subprocess.Popen[bytes]:
    """The runtime section's AsyncTask worker (1 x 10), with the setting under test."""
    system = AsyncTask()
    env = system.env(settings.redis_url, marker) | {
        "ASYNCTASK_REDIS_MIN_REPLICAS": str(settings.redis_min_replicas),
        "ASYNCTASK_TRACKING": "false",
    }
    return procs.spawn(system.worker_argv(10), env=env, cwd=ROOT, log=root / "worker.log")


def _latency(settings: Settings, jobs: int, root: Path, found: Figures) -> None:
    marker = root / "latency.marker"
    marker.write_bytes(b"")
    worker = _worker(settings, marker, root)
    client = Client(settings)
    try:
        # The first job waits for the worker's start: left out of the figures.
        client.push({"class": LATENCY_NAME, "args": [time.time()]})
        _wait_for(marker, RECORD, READY_TIMEOUT)
        for _ in range(jobs):
            client.push({"class": LATENCY_NAME, "args": [time.time()]})
            time.sleep(PACE)
        _wait_for(marker, (jobs + 1) * RECORD, READY_TIMEOUT)
    finally:
        client.close()
        procs.stop(worker, grace=STOP_GRACE)
    samples = [float(line) for line in marker.read_text().split()[1:]]
    found.latency_p50_ms.append(percentile(samples, 50))
    found.latency_p99_ms.append(percentile(samples, 99))


def _drain(settings: Settings, jobs: int, root: Path, found: Figures) -> None:
    marker = root / "drain.marker"
    marker.write_bytes(b"")
    client = Client(settings)
    try:
        client.push_bulk({"class": NAME, "args": [[]] * jobs})
    finally:
        client.close()
    worker = _worker(settings, marker, root)
    try:
        deadline = time.monotonic() + drain_timeout(jobs)
        first_done = 0
        for poll in poll_marker(marker, jobs):
            if poll.started:
                first_done = poll.done
            if poll.last:
                found.drain_rate.append((jobs - first_done) / (poll.now - poll.first))
            if poll.now > deadline:
                raise RuntimeError(f"the drain did not end within {drain_timeout(jobs):.0f} s")
    finally:
        procs.stop(worker, grace=STOP_GRACE)


def _wait_for(marker: Path, size: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for poll in poll_marker(marker, size):
        if not poll.last and poll.now > deadline:
            raise RuntimeError(f"the worker did not run its jobs within {timeout:.0f} s")


def _report(figures: dict[int, Figures]) -> list[str]:
    columns = [
        ("push calls/s", "push_rate", rate),
        ("push p50 µs", "push_p50_us", fixed(0)),
        ("push p99 µs", "push_p99_us", fixed(0)),
        ("enqueue to start p50 ms", "latency_p50_ms", fixed(2)),
        ("enqueue to start p99 ms", "latency_p99_ms", fixed(2)),
        ("drain jobs/s (1 x 10)", "drain_rate", rate),
    ]
    rows = [
        [
            f"`redis_min_replicas={n}`",
            *(spread(getattr(figures[n], attr), shown) for _, attr, shown in columns),
        ]
        for n in (0, 1)
    ]
    ratios = [
        spread(
            [a / b for a, b in zip(getattr(figures[1], attr), getattr(figures[0], attr), strict=True) if b],
            ratio,
        )
        for _, attr, _ in columns
    ]
    rows.append(["1 ÷ 0, per repetition", *ratios])
    return ["", *table(["setting", *(title for title, _, _ in columns)], rows)]


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, redis.RedisError) as exc:
        sys.exit(f"python -m bench.replicas: {exc}")
