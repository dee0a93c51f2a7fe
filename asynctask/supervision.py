"""Keeping a worker's background loops alive through any failure.

Every background loop (heartbeat, orphan recovery, claim checks, the scheduled poller, the
tracking sender) runs its steps through an ``Activity``: an exception of any kind is logged
and the loop carries on after a pause that doubles with each consecutive failure, so that
a broker outage neither kills the thread nor floods the log. An outage is logged once when
it starts (with the traceback when the error is not the broker's own) and once when it ends,
with its duration and how many attempts failed in between.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

T = TypeVar("T")

#: First pause after a failure, in seconds; it doubles with each consecutive failure.
FIRST_PAUSE = 0.1
#: The longest pause between two attempts, in seconds.
MAX_PAUSE = 5.0
#: How long ``Loop.stop`` waits for a step under way to end, in seconds.
STOP_WAIT = 5.0

logger = logging.getLogger("asynctask.supervision")


@dataclass(eq=False)
class Activity:
    """One recurring piece of background work, watched for failures; safe to share between
    the threads doing the same work (the processors' fetches)."""

    name: str
    logger: logging.Logger
    #: Errors that mean a store is unreachable: logged on one line, without a traceback.
    expected: tuple[type[BaseException], ...] = ()
    max_pause: float = MAX_PAUSE
    failures: int = field(default=0, init=False)
    _failing_since: float = field(default=0.0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def attempt(self, step: Callable[[], T]) -> T | None:
        """Run ``step``; return its result, or None if it raised (the error is logged)."""
        try:
            result = step()
        except (Exception, SystemExit) as exc:
            self.failed(exc)
            return None
        self.succeeded()
        return result

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            self.failures += 1
            first = self.failures == 1
            if first:
                self._failing_since = time.monotonic()
        if not first:
            self.logger.debug("%s failed again: %s", self.name, exc)
            return
        fields = {"fields": {"activity": self.name, "error": type(exc).__name__}}
        if isinstance(exc, self.expected):
            self.logger.error("%s failed: %s; retrying", self.name, exc, extra=fields)
        else:
            self.logger.error("%s failed; retrying", self.name, exc_info=exc, extra=fields)

    def succeeded(self) -> None:
        if not self.failures:
            return
        with self._lock:
            failures, self.failures = self.failures, 0
        if failures:
            self.logger.warning(
                "%s recovered",
                self.name,
                extra={
                    "fields": {
                        "activity": self.name,
                        "failed_attempts": failures,
                        "seconds": round(time.monotonic() - self._failing_since, 3),
                    }
                },
            )

    def pause(self) -> float:
        """Seconds to wait before the next attempt after the last one failed."""
        return backoff(self.failures, self.max_pause)


def backoff(failures: int, max_pause: float = MAX_PAUSE) -> float:
    """Seconds to wait after ``failures`` consecutive failures."""
    return min(max_pause, FIRST_PAUSE * 2.0 ** max(0, failures - 1))


def join_stopped(thread: threading.Thread) -> None:
    """Wait up to ``STOP_WAIT`` for ``thread``, asked to stop, to end the step under way: its
    owner closes the broker next, and a step still holding one of the broker's connections then
    would leave it open forever. A thread never started, or the calling one, is not waited for."""
    if thread.is_alive() and thread is not threading.current_thread():
        thread.join(STOP_WAIT)
        if thread.is_alive():
            logger.warning("%s is still in a step %.0f s after its stop", thread.name, STOP_WAIT)


class Loop(ABC):
    """A background loop on a daemon thread of its own: ``run`` until ``stop``.

    A dataclass subclass gets its thread in ``__post_init__``, once its fields are set."""

    #: The name of the loop's thread, as thread dumps show it.
    thread_name: ClassVar[str]
    _stopped: threading.Event
    thread: threading.Thread

    def __post_init__(self) -> None:
        self._stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop, and wait for a step under way to end."""
        self._stopped.set()
        join_stopped(self.thread)

    @abstractmethod
    def run(self) -> None:
        """The loop; it returns once ``_stopped`` is set."""
