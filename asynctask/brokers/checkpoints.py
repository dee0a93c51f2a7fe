"""What resumable jobs ask of a broker (``Broker.checkpoints``): their checkpoints and stop
requests, stored by jid apart from the payload.

A checkpoint is a resumable job's last cursor (JSON text) and how many iterations led to it.
It is kept apart from the payload so that whatever brings the job back (a retry, a shutdown's
requeue, the recovery of a dead process's claims, a resume) continues from it, whichever
bytes were pushed. A stop request is a flag beside it: the worker running the job reads it
with every checkpoint it stores, and a worker about to start the job reads it first.

Stopped jobs themselves live in the ``stopped`` job set (``asynctask.api.StoppedSet``), put
there by ``Broker.park`` (a running job) or by the read model's park primitives (a job still
waiting in a queue, the schedule or the retry set).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

#: Seconds a checkpoint is kept after it was last written (Redis expires it; 30 days, as
#: Sidekiq keeps an iterable job's state).
CHECKPOINT_TTL = 30 * 24 * 3600


@dataclass(frozen=True, slots=True)
class Checkpoint:
    #: The last stored cursor as JSON text; None if the job never stored one.
    cursor: str | None = None
    #: Iterations run up to that cursor, over every run of the job.
    iterations: int = 0
    #: Whether a stop was requested and not withdrawn by a resume.
    stop: bool = False


class Checkpoints(ABC):
    errors: ClassVar[tuple[type[BaseException], ...]]

    @abstractmethod
    def load(self, jid: str) -> Checkpoint:
        """The job's checkpoint and stop request (an empty ``Checkpoint`` if none); one round trip."""

    @abstractmethod
    def save(self, jid: str, cursor: str, iterations: int) -> bool:
        """Store the job's checkpoint; return whether a stop is requested. One round trip."""

    @abstractmethod
    def clear(self, jid: str) -> None:
        """Forget the job's checkpoint and stop request (it finished)."""

    @abstractmethod
    def request_stop(self, jid: str) -> bool:
        """Flag a stop for the job, never touching its cursor; False if one was already flagged."""

    @abstractmethod
    def withdraw_stop(self, jid: str) -> None:
        """Remove a stop flag (the job is being resumed, or was found nowhere); the cursor stays."""

    @abstractmethod
    def is_claimed(self, jid: str) -> bool:
        """Whether a worker process holds the job now (running it, or about to)."""
