"""Adding work to a running job's task, for the jobs of one worker process: with the worker's
own settings and job registry (``tasks.additions``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from asynctask.context import TaskAdder
from asynctask.registry import Registry
from asynctask.settings import Settings

if TYPE_CHECKING:
    from asynctask.tasks.additions import Adding


class WorkerAdder(TaskAdder):
    """What it needs (a client, the tracking database's engine, the task code) is made at the
    first call: most workers never add, and a worker's start stays small."""

    def __init__(self, settings: Settings, registry: Registry) -> None:
        self.settings = settings
        self.registry = registry
        self._lock = threading.Lock()
        self._adding: Adding | None = None

    def __call__(
        self, task_id: str, call: str, items: Iterable[Any], job: object | None, chunk_size: int | None
    ) -> list[str]:
        return self._open().add(task_id, call, items, job, chunk_size)

    def close(self) -> None:
        """Close what the first call opened (the jobs have stopped)."""
        with self._lock:
            adding, self._adding = self._adding, None
        if adding is not None:
            adding.close()

    def _open(self) -> Adding:
        with self._lock:
            if self._adding is None:
                from asynctask.tasks.additions import Adding

                self._adding = Adding.open(self.settings, self.registry)
            return self._adding
