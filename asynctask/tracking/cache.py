"""A short-lived cache of tasks' first errors, for servers that answer many status polls.

The first errors cost two of ``get_task``'s three statements and most of its Python time,
yet change rarely. An entry is used only while the task row still has the same failed and
error counts and finish time, and for ``ttl`` seconds at most: a change that leaves those
columns equal (one job leaving the error state as another enters it, in one flush) shows
within ``ttl``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from sqlalchemy import Row

from asynctask.tracking.views import EventView

#: Entries kept before the cache starts over (bounds memory whatever the traffic).
CACHE_LIMIT = 10_000


class FirstErrorsCache:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, int], tuple[Hashable, float, list[EventView]]] = {}

    def get(self, task: Row[Any], limit: int, load: Callable[[], list[EventView]]) -> list[EventView]:
        if self.ttl <= 0:
            return load()
        key = (task.id, limit)
        validator = (task.count_failed, task.count_error, task.count_lost, task.finished_at, task.state)
        now = time.monotonic()
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry[0] == validator and now - entry[1] < self.ttl:
            return entry[2]
        errors = load()
        with self._lock:
            if len(self._entries) >= CACHE_LIMIT:
                self._entries.clear()
            self._entries[key] = (validator, now, errors)
        return errors
