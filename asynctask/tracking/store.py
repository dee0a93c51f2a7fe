"""What tracking asks of the store that holds the jobs: where transitions are written and
tasks are marked cancelled. Each broker offers one (``Broker.tracking``), kept on the same
connections as its jobs, so a transition can be written in the same atomic step as the job
operation it describes (an acknowledgement, a move to the retry set).

Defined here, not in ``brokers``, so that tracking's worker side (``tracker``) depends on
this contract alone and the brokers, which implement it, depend on tracking, never the
other way round.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Protocol

from asynctask.tracking.outbox import Outbox

#: Seconds the cancellation news a job of another runtime starts on may be old: its process
#: reads it at most this often, and ``cancel_task`` of such a task waits this long before it
#: returns, so that no job of the task starts after it returned.
CANCEL_NEWS_AGE = 0.05


class Claims(Protocol):
    """The part of a worker's fetcher the tracker reads: the outbox its round trips write, and
    the token that changes whenever a task is cancelled."""

    outbox: Outbox
    cancel_generation: bytes


class TrackingApplier(ABC):
    """What applies a worker's recorded tracking transitions to SQL, beside the worker, when
    the broker does not do it itself (the Redis broker's flusher)."""

    @abstractmethod
    def start(self) -> None:
        """The worker started."""

    @abstractmethod
    def wake(self) -> None:
        """The worker recorded its first transition."""

    @abstractmethod
    def check(self) -> None:
        """At every heartbeat: restart what died, start if work is waiting."""

    @abstractmethod
    def stop(self) -> None:
        """After the worker's last transitions are written: apply them and stop."""


class TrackingStore(ABC):
    #: Errors that mean the store is unreachable or refused a command (the broker's own):
    #: callers log them and try again.
    errors: tuple[type[BaseException], ...]

    def record(self, outbox: Outbox) -> int:
        """Write the outbox's pending transitions, a batch per call; return how many."""
        written = 0
        while len(outbox):
            with outbox.draining() as transitions:
                if transitions:
                    self.write_transitions(transitions)
                written += len(transitions)
        return written

    @abstractmethod
    def write_transitions(self, transitions: list[str]) -> None:
        """Store one batch of encoded tracking transitions, atomically."""

    @abstractmethod
    def position(self) -> int:
        """The number of the last tracking transition recorded (transitions are numbered in
        the order they were stored)."""

    @abstractmethod
    def cancel_task(self, task_id: str) -> int:
        """Mark a task cancelled for every worker; return the tracking position at that moment."""

    @abstractmethod
    def cancel_generation(self) -> bytes:
        """A token that changes whenever a task is cancelled."""

    @abstractmethod
    def cancelled_tasks(self) -> frozenset[str]: ...

    @abstractmethod
    def is_cancelled(self, task_id: str) -> bool: ...

    def through(self, connection: object) -> TrackingStore:
        """This store, writing over ``connection`` (a client its caller already holds) when that
        reaches the same database; otherwise this store as it is."""
        return self

    def applier(self, identity: str) -> TrackingApplier | None:
        """What must run beside worker ``identity`` to apply its tracking transitions; None
        when the store applies them itself (SQL: in each job's own transaction) or tracking
        is off."""
        return None
