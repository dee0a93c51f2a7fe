"""Per-process counters and busy-thread state, flushed to the broker by the heartbeat."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass


@dataclass(slots=True)
class Work:
    """What one processor thread is running, for the ``<identity>:work`` hash."""

    queue: str
    #: The job's bytes as fetched; decoded only when the heartbeat writes them.
    payload: bytes
    run_at: int


class Stats:
    """Processed/failed counts since the last flush, and the jobs running now, by thread id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.processed = 0
        self.failed = 0
        self.busy: dict[str, Work] = {}

    def count(self, *, failed: bool) -> None:
        with self._lock:
            self.processed += 1
            if failed:
                self.failed += 1

    def take(self) -> tuple[int, int]:
        """Return and reset the counts; give them back with ``restore`` if the flush fails."""
        with self._lock:
            counts = (self.processed, self.failed)
            self.processed = self.failed = 0
            return counts

    def restore(self, processed: int, failed: int) -> None:
        with self._lock:
            self.processed += processed
            self.failed += failed

    def snapshot(self) -> dict[str, Work]:
        with self._lock:
            return dict(self.busy)

    def started(self, tid: str, work: Work) -> None:
        with self._lock:
            self.busy[tid] = work

    def finished(self, tid: str, *, failed: bool) -> None:
        """The job of thread ``tid`` is over: forget it and count it, under one lock; once
        (a job interrupted at shutdown is counted when the timeout hits, and again by nobody
        when its thread unwinds later)."""
        with self._lock:
            if self.busy.pop(tid, None) is None:
                return
            self.processed += 1
            if failed:
                self.failed += 1


def thread_tid() -> str:
    """Sidekiq's thread id: ``(thread id ^ pid)`` in base 36."""
    value = threading.get_ident() ^ os.getpid()
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, rest = divmod(value, 36)
        out = digits[rest] + out
        if value == 0:
            return out
