"""Recycling: a worker process that ran ``max_jobs`` jobs, or that a job left above
``max_memory_mb`` of RSS, stops gracefully so that the worker command starts afresh, as
Celery's ``max_tasks_per_child`` / ``max_memory_per_child`` do. A job that leaks (or a
library that caches without bound) then costs a restart, not the machine's memory.

The check runs after each job (as server middleware, so it sees every job that ran): past
either bound the process goes quiet at once, so that the thread that finished the job starts
no other, then stops as on TERM (running jobs finish within ``timeout``, unstarted ones go
back to their queues); the command then replaces its process with a fresh interpreter.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from asynctask.worker.heartbeat import rss_kb
from asynctask.worker.launcher import Worker

logger = logging.getLogger("asynctask.worker")


class Recycler:
    """Server middleware counting jobs and reading the RSS after each; calls ``recycle``
    once, the first time a bound is passed."""

    def __init__(self, max_jobs: int, max_memory_mb: int, recycle: Callable[[], None]) -> None:
        self.max_jobs = max_jobs
        self.max_memory_mb = max_memory_mb
        self.recycle = recycle
        #: Why the process is being recycled, once it is.
        self.reason: str | None = None
        self._jobs = 0
        self._lock = threading.Lock()

    def __call__(self, definition: Any, job: Any, queue: str, call_next: Callable[[], Any]) -> Any:
        try:
            return call_next()
        finally:
            self._check()

    async def acall(
        self, definition: Any, job: Any, queue: str, call_next: Callable[[], Awaitable[Any]]
    ) -> Any:
        try:
            return await call_next()
        finally:
            # On the loop: an RSS read is a small file read, and the recycle only signals a stop.
            self._check()

    def _check(self) -> None:
        with self._lock:
            self._jobs += 1
            if self.reason is not None:
                return
            if self.max_jobs and self._jobs >= self.max_jobs:
                self.reason = f"{self._jobs} jobs run (max jobs {self.max_jobs})"
            elif self.max_memory_mb and (rss := rss_kb() // 1024) > self.max_memory_mb:
                self.reason = f"RSS {rss} MB over max memory {self.max_memory_mb} MB"
            else:
                return
        logger.warning("recycling the worker process: %s", self.reason)
        self.recycle()


def run_recycling(worker: Worker) -> bool:
    """Run ``worker`` until it stops; return whether it stopped to be replaced."""
    settings = worker.settings
    recycler = Recycler(settings.max_jobs, settings.max_memory_mb, lambda: _recycle(worker))
    if settings.max_jobs or settings.max_memory_mb:
        worker.manager.server_chain.prepend(recycler)
    worker.run()
    return recycler.reason is not None


def _recycle(worker: Worker) -> None:
    worker.quiet()
    worker.stop()
