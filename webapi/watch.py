"""One reader per process for every open progress stream.

However many browsers watch a task, the process reads it from SQL once per
``stream_interval`` (once per number of first errors its streams ask for: one read with the
default); each stream waits on a condition and wakes only when the task's snapshot changed, or
to send a keepalive.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from asynctask.errors import TaskNotFound
from asynctask.tracking import queries
from asynctask.tracking.status import TaskStatus
from asynctask.tracking.views import TaskView

logger = logging.getLogger("asynctask.api")

#: A task in one of these states changes no more once nothing of it is running.
_SETTLED = {TaskStatus.FINISHED, TaskStatus.FINISHED_WITH_ERRORS, TaskStatus.ABORTED, TaskStatus.CANCELLED}


def is_settled(view: TaskView) -> bool:
    if view.status == TaskStatus.CANCELLED:
        return view.finished_at is not None
    return view.status in _SETTLED


@dataclass
class Snapshot:
    #: Bumped on every change; a stream remembers the last one it sent.
    version: int
    view: TaskView
    settled: bool
    #: The view without its ETA, which moves with the clock alone: a stalled task sends
    #: nothing new.
    key: TaskView


@dataclass
class _Watch:
    snapshot: Snapshot
    streams: int


#: A task's id and the number of first errors read with it.
_Key = tuple[str, int]


class TaskWatcher:
    def __init__(
        self, engine: Engine, interval: float, shown: Callable[[TaskView], TaskView] = lambda view: view
    ) -> None:
        """``shown``: what a view read from SQL becomes before streams see it (the app adds a
        fed task's held jobs, which its broker counts)."""
        self.engine = engine
        self.interval = interval
        self.shown = shown
        self._changed = threading.Condition()
        self._watches: dict[_Key, _Watch] = {}
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    @contextmanager
    def watching(self, first: TaskView, errors: int) -> Iterator[Callable[[int, float], Snapshot]]:
        """Register a stream of ``first``'s task (read with ``errors`` first errors); yields
        ``wait(after_version, timeout)``."""
        key = (first.id, errors)
        with self._changed:
            watch = self._watches.get(key)
            if watch is None:
                watch = _Watch(self._snapshot(first, 1), 0)
                self._watches[key] = watch
            watch.streams += 1
            self._ensure_thread()
            # The reader sleeps while nothing is watched: wake it.
            self._changed.notify_all()

        def wait(after: int, timeout: float) -> Snapshot:
            with self._changed:
                self._changed.wait_for(lambda: watch.snapshot.version != after, timeout)
                return watch.snapshot

        try:
            yield wait
        finally:
            with self._changed:
                watch.streams -= 1
                if watch.streams == 0:
                    self._watches.pop(key, None)

    @staticmethod
    def _snapshot(view: TaskView, version: int) -> Snapshot:
        return Snapshot(version, view, is_settled(view), replace(view, eta_seconds=None))

    def close(self, timeout: float = 10.0) -> None:
        """Stop the reader and wait for it (up to ``timeout`` seconds). A connection it still
        held when its engine was disposed would go back to the disposed pool and stay open until
        the garbage collector found it: whoever disposes the engine closes the watcher first."""
        with self._changed:
            self._closed.set()
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _ensure_thread(self) -> None:
        if self._closed.is_set():
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="asynctask-api-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        failing = False
        while True:
            with self._changed:
                # Sleeps until the first stream opens; the thread is idle, not gone.
                self._changed.wait_for(lambda: bool(self._watches) or self._closed.is_set())
                if self._closed.is_set():
                    return
                watched = [key for key, w in self._watches.items() if not w.snapshot.settled]
            try:
                views = self._read(watched)
                if failing:
                    logger.info("progress streams: database reachable again")
                failing = False
            except SQLAlchemyError as exc:
                if not failing:
                    logger.warning("progress streams: cannot read tasks: %s", exc)
                failing = True
                views = {}
            with self._changed:
                for key, view in views.items():
                    watch = self._watches.get(key)
                    if watch is None:
                        continue
                    snapshot = self._snapshot(view, watch.snapshot.version + 1)
                    if snapshot.key != watch.snapshot.key:
                        watch.snapshot = snapshot
                self._changed.notify_all()
            if self._closed.wait(self.interval):
                return

    def _read(self, watched: list[_Key]) -> dict[_Key, TaskView]:
        views: dict[_Key, TaskView] = {}
        if not watched:
            return views
        with self.engine.connect() as connection:
            for task_id, errors in watched:
                try:
                    views[task_id, errors] = queries.get_task(connection, task_id, errors=errors)
                except TaskNotFound:
                    continue
        return {key: self.shown(view) for key, view in views.items()}
