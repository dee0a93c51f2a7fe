"""The resumable section: what the resumable runtime costs a job of many cheap iterations.

For each repetition and broker (Redis, PostgreSQL), one worker process
(``python -m asynctask worker -r bench/resumable/jobs.py -c 1``) starts from an empty broker and
runs, one job at a time, a warm-up pair of small jobs and then ``plain_noop(N)`` and
``resumable_noop(N)`` (bench/resumable/jobs.py), in an order reversed every other repetition.
Both run the same generator of N no-op iterations; the plain job loops over it in Python, the
resumable one is driven by the runtime (batches, checks between them, checkpoints at most every
``checkpoint_interval`` seconds).

Each job's run time is measured in the worker by the jobs module's server middleware (the wall
time of its invocation): pushing and fetching are left out, the runtime's own work is in. The
bench pushes a job once the one before it is timed, so the worker runs nothing else meanwhile.
A run is an error unless its job ran without failing, under its own name, and (resumable) the
runtime saw it yield its last index; after the worker stops, its queue must be empty.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asynctask import Client, Settings, default_registry
from asynctask.job import JobDefinition
from bench.core import procs
from bench.core.drain import RUN_ERRORS, BenchBroker, one_line, open_brokers, say
from bench.core.redis_server import RedisServer
from bench.core.results import SectionResults, section_frame
from bench.core.system import ROOT, clean_env
from bench.core.timing import MIN_TIMEOUT, STOP_GRACE
from bench.resumable.jobs import PLAIN_NAME, RESUMABLE_NAME, plain_noop, resumable_noop

JOBS_MODULE = "bench/resumable/jobs.py"
PLAIN = "plain"
RESUMABLE = "resumable"
JOBS: dict[str, JobDefinition[Any]] = {PLAIN: plain_noop, RESUMABLE: resumable_noop}
NAMES = {PLAIN: PLAIN_NAME, RESUMABLE: RESUMABLE_NAME}
#: Iterations of each warm-up job: enough to go through every step of a run once (the first
#: checkpoint load, the first batches), so that neither measured job pays for a first time.
WARMUP_ITERATIONS = 1000
#: Seconds between two reads of the times file: coarse, so that the bench takes little of the
#: CPU the job runs on (this machine has 2 cores).
POLL_EVERY = 0.01


def order(rep: int) -> list[str]:
    """The jobs of repetition ``rep``, reversed every other one so that a drift of the
    machine's load falls on both alike."""
    cases = [PLAIN, RESUMABLE]
    return cases if rep % 2 == 0 else cases[::-1]


@dataclass
class ResumableRun:
    backend: str
    case: str
    iterations: int
    #: Wall time of the job's server middleware invocation, in the worker.
    seconds: float = 0.0
    #: The last checkpoint the runtime saw (a resumable job's ``current_job().iteration``).
    cursor: str | None = None
    load_before: float = 0.0
    error: str = ""

    def ns_per_iteration(self) -> float:
        return self.seconds / self.iterations * 1e9 if self.iterations else 0.0


@dataclass
class ResumableResults(SectionResults[ResumableRun]):
    """The resumable-jobs section's results."""


def run(settings: dict[str, Any], pg_url: str, server: RedisServer, workdir: Path) -> ResumableResults:
    results = ResumableResults(settings)
    with section_frame(results) as stack:
        brokers = open_brokers(results, pg_url, server, stack, "resumable", settings["backends"])
        for rep in range(settings["reps"]):
            for broker in brokers:
                _repetition(results, broker, rep, workdir)
    return results


class _Worker:
    """One worker process and a client pushing to it; ``timed`` runs one job and returns the
    middleware's record of it."""

    def __init__(self, broker: BenchBroker, times: Path, log: Path) -> None:
        self.times, self.log = times, log
        env = clean_env(PYTHONPATH=str(ROOT), ASYNCTASK_TRACKING="false", BENCH_RESUMABLE_TIMES=str(times))
        argv = [
            sys.executable, "-m", "asynctask", "worker", "--broker", broker.url,
            "-r", JOBS_MODULE, "-c", "1", "-q", "default",
        ]  # fmt: skip
        self.client = Client(Settings(broker_url=broker.url, tracking=False), registry=default_registry)
        try:
            self.proc = procs.spawn(argv, env=env, cwd=ROOT, log=log)
        except BaseException:
            self.client.close()
            raise
        self.records = 0

    def close(self) -> None:
        try:
            procs.stop(self.proc, grace=STOP_GRACE)
        finally:
            self.client.close()

    def timed(self, case: str, iterations: int) -> dict[str, Any]:
        JOBS[case].set(client=self.client).perform_async(iterations)
        deadline = time.monotonic() + MIN_TIMEOUT
        while True:
            lines = self.times.read_text(encoding="utf-8").splitlines()
            if len(lines) > self.records:
                self.records += 1
                record: dict[str, Any] = json.loads(lines[self.records - 1])
                return record
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the worker exited with {self.proc.returncode}: {procs.log_tail(self.log)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {MIN_TIMEOUT:.0f} s waiting for the {case} job")
            time.sleep(POLL_EVERY)


def _repetition(results: ResumableResults, broker: BenchBroker, rep: int, workdir: Path) -> None:
    s = results.settings
    label = f"resumable-{broker.backend}-r{rep}"
    times = workdir / f"{label}.times"
    times.write_bytes(b"")
    runs = [ResumableRun(broker.backend, case, s["iterations"]) for case in order(rep)]
    try:
        broker.empty()
        worker = _Worker(broker, times, workdir / f"{label}.log")
        try:
            for case in (PLAIN, RESUMABLE):
                warmup = ResumableRun(broker.backend, case, WARMUP_ITERATIONS)
                if error := check(warmup, worker.timed(case, WARMUP_ITERATIONS)):
                    raise RuntimeError(f"warm-up: {error}")
            for one in runs:
                one.load_before = os.getloadavg()[0]
                one.error = check(one, worker.timed(one.case, one.iterations))
        finally:
            worker.close()
        if (left := broker.queued("default")) != 0:
            results.failures.append(f"{label}: {left} jobs left in the queue after the worker stopped")
    except RUN_ERRORS as exc:
        for one in runs:
            if not one.seconds and not one.error:
                one.error = one_line(exc)
    for one in runs:
        results.runs.append((rep, one))
        _say(rep, s["reps"], one)


def check(one: ResumableRun, record: dict[str, Any]) -> str:
    """Fill ``one`` from the middleware's ``record``; what is wrong with it, or ""."""
    one.seconds, one.cursor = float(record["seconds"]), record["cursor"]
    if record["error"]:
        return f"the job failed: {record['error']}"
    if record["class"] != NAMES[one.case]:
        return f"timed {record['class']}, expected {NAMES[one.case]}"
    expected = str(one.iterations - 1) if one.case == RESUMABLE else None
    if one.cursor != expected:
        return f"the runtime's last checkpoint was {one.cursor}, expected {expected}"
    return ""


def _say(rep: int, reps: int, one: ResumableRun) -> None:
    say(
        f"rep {rep + 1}/{reps} resumable: {one.case} job of {one.iterations:,} iterations on {one.backend}",
        one.error,
        f"{one.seconds:.3f} s ({one.ns_per_iteration():.0f} ns/iteration)",
    )
