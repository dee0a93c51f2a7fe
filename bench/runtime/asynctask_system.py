"""AsyncTask under test: ``perform_bulk``/``perform_async`` to enqueue, the CLI worker to process."""

from __future__ import annotations

import sys
from pathlib import Path

from asynctask import Settings
from bench.core.system import ROOT, System, clean_env


def enqueue_argv(url: str, mode: str, jobs: int, batch: int) -> list[str]:
    return [sys.executable, "-m", "bench.core.enqueue", url, mode, str(jobs), str(batch)]


def latency_argv(url: str, jobs: int, rate: float) -> list[str]:
    return [sys.executable, "-m", "bench.core.enqueue", url, "latency", str(jobs), repr(rate)]


def worker_argv(concurrency: int) -> list[str]:
    # Exactly what a user types: the CLI, the job module by path, one queue.
    return [
        sys.executable, "-m", "asynctask", "worker",
        "-r", "bench/core/noop_jobs.py", "-c", str(concurrency), "-q", "default",
    ]  # fmt: skip


def env(url: str, marker: Path | None) -> dict[str, str]:
    extra = {"ASYNCTASK_REDIS_URL": url, "PYTHONPATH": str(ROOT)}
    if marker is not None:
        extra["BENCH_MARKER"] = str(marker)
    return clean_env(**extra)


def describe() -> list[str]:
    s = Settings()
    return [
        "enqueue: `NoopJob.perform_bulk(args, batch_size=1000)` (pipelined SADD + LPUSH per batch); "
        "single: `perform_async()` in a loop (one pipelined round trip per job); "
        "latency: `LatencyJob.perform_async(time.time())`, one call per job at the paced times",
        "worker: `python -m asynctask worker -r bench/core/noop_jobs.py -c C -q default`, "
        "`ASYNCTASK_REDIS_URL` set, nothing else",
        f"defaults in force: log level {s.log_level} (no per-job log), fetch_timeout {s.fetch_timeout} s, "
        f"heartbeat {s.heartbeat_interval} s, scheduled poll {s.scheduled_poll_interval} s, "
        f"shutdown timeout {s.timeout} s, empty client and server middleware chains",
        "fetch: reliable fetch, one EVALSHA per job (LREM ack of the previous job + LMOVE "
        "queue -> in-flight list); BLMOVE when the queue is empty (an idle worker starts the job on "
        "that one reply)",
        "redis-py connection pool of concurrency + 8, hiredis parser",
    ]


SYSTEM = System(
    name="AsyncTask",
    enqueue_argv=enqueue_argv,
    latency_argv=latency_argv,
    worker_argv=worker_argv,
    env=env,
    describe=describe,
    inflight_pattern="asynctask:inflight|*",
    processed_stat=True,
)
