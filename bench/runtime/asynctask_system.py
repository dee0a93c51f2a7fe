"""AsyncTask under test: ``perform_bulk``/``perform_async`` to enqueue, the CLI worker to process
(sync jobs, or async ones: ``ASYNC_SYSTEM``); and AsyncTask as it was at a git commit
(``at_ref``), for an A/B of a change in one interleaved run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from asynctask import Settings
from bench.core import gitref
from bench.core.system import ROOT, System, byte_compile, clean_env, marker_env

#: The name of AsyncTask at a commit: ``AsyncTask @ <commit>``.
AT_REF_PREFIX = "AsyncTask @ "


class AsyncTask(System):
    name = "AsyncTask"
    inflight_pattern = "asynctask:inflight|*"
    processed_stat = True

    def enqueue_argv(self, url: str, mode: str, jobs: int, batch: int) -> list[str]:
        return [sys.executable, "-m", "bench.core.enqueue", url, mode, str(jobs), str(batch)]

    def latency_argv(self, url: str, jobs: int, rate: float) -> list[str]:
        return [sys.executable, "-m", "bench.core.enqueue", url, "latency", str(jobs), repr(rate)]

    def worker_argv(self, concurrency: int) -> list[str]:
        # Exactly what a user types: the CLI, the job module by path, one queue.
        return [
            sys.executable, "-m", "asynctask", "worker",
            "-r", "bench/core/noop_jobs.py", "-c", str(concurrency), "-q", "default",
        ]  # fmt: skip

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        return clean_env(ASYNCTASK_REDIS_URL=url, PYTHONPATH=str(ROOT), **marker_env(marker))

    def describe(self) -> list[str]:
        s = Settings()
        return [
            "enqueue: `NoopJob.perform_bulk(args, batch_size=1000)` (pipelined SADD + LPUSH per batch); "
            "single: `perform_async()` in a loop (one pipelined round trip per job); "
            "latency: `LatencyJob.perform_async(time.time())`, one call per job at the paced times",
            "worker: `python -m asynctask worker -r bench/core/noop_jobs.py -c C -q default`, "
            "`ASYNCTASK_REDIS_URL` set, nothing else",
            f"defaults in force: log level {s.log_level} (no per-job log), "
            f"fetch_timeout {s.fetch_timeout} s, heartbeat {s.heartbeat_interval} s, "
            f"scheduled poll {s.scheduled_poll_interval} s, "
            f"shutdown timeout {s.timeout} s, empty client and server middleware chains",
            "fetch: reliable fetch, one EVALSHA per job (LREM ack of the previous job + LMOVE "
            "queue -> in-flight list); BLMOVE when the queue is empty (an idle worker starts the job on "
            "that one reply)",
            "redis-py connection pool of concurrency + 8, hiredis parser",
        ]


class AsyncJobs(AsyncTask):
    """The same jobs as ``async def``, run by the same CLI and settings."""

    name = "AsyncTask (async)"

    def enqueue_argv(self, url: str, mode: str, jobs: int, batch: int) -> list[str]:
        # One call per job from an event loop: ``aperform_async``, by many coroutines at once.
        return super().enqueue_argv(url, "coroutines" if mode == "single" else mode, jobs, batch)

    def worker_argv(self, concurrency: int) -> list[str]:
        # The same jobs as async def: C of them awaited at once on the event loop, default threads.
        return [
            sys.executable, "-m", "asynctask", "worker",
            "-r", "bench/core/async_noop_jobs.py", "-a", str(concurrency), "-q", "default",
        ]  # fmt: skip

    def describe(self) -> list[str]:
        return [
            "the same enqueuer and settings; the jobs `NoopJob` and `LatencyJob` as `async def` "
            "(`bench/core/async_noop_jobs.py`)",
            "single: `await NoopJob.aperform_async()` from 1,000 coroutines on one event loop, with the "
            "loop's longest stall (how late a 1 ms timer on it woke, at most)",
            "worker: `python -m asynctask worker -r bench/core/async_noop_jobs.py -a C -q default`: "
            "C jobs awaited at once on the process's event loop, fetched by its 10 processor threads",
        ]


class AtRef(AsyncTask):
    """AsyncTask with the package ``asynctask`` of ``commit`` (``ref``), exported into ``tree``:
    this tree's interpreter, jobs module and enqueuer, the same commands otherwise. Its
    processes run in the export, so they import its package, not this tree's."""

    def __init__(self, ref: str, commit: str, tree: Path) -> None:
        self.ref, self.commit = ref, commit
        self.name = f"{AT_REF_PREFIX}{commit}"
        self.cwd = tree

    def worker_argv(self, concurrency: int) -> list[str]:
        argv = super().worker_argv(concurrency)
        argv[argv.index("bench/core/noop_jobs.py")] = str(ROOT / "bench" / "core" / "noop_jobs.py")
        return argv

    def env(self, url: str, marker: Path | None) -> dict[str, str]:
        # The export first (for the supervisor's children too), then this tree for the bench's code.
        return super().env(url, marker) | {"PYTHONPATH": f"{self.cwd}{os.pathsep}{ROOT}"}

    def describe(self) -> list[str]:
        return [
            f"the same commands and settings with the package `asynctask` of commit {self.commit} "
            f"(`{self.ref}`, exported with `git archive`) in place of this tree's",
        ]


SYSTEM = AsyncTask()
ASYNC_SYSTEM = AsyncJobs()


def at_ref(ref: str, workdir: Path) -> System:
    """AsyncTask as of git ``ref`` (``AtRef``), its package exported into ``workdir``.

    Raises ``SystemExit`` when ``ref`` names no commit or the export fails.
    """
    commit = gitref.commit_of(ref, "python -m bench --ab")
    tree = workdir / f"asynctask-{commit}"
    gitref.export(commit, tree, "asynctask", command="python -m bench --ab")
    byte_compile(tree)
    return AtRef(ref, commit, tree)
