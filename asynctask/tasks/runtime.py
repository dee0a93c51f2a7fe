"""Tasks whose jobs another runtime runs (Celery, RQ, Dramatiq): their chunks are sent through
that runtime's own client.

An integration (``asynctask.integrations``) wraps the runtime's job in a ``RuntimeJob`` with a
``Sender``; ``create_task`` and ``retry_task`` then send through it, and the HTTP API creates
tasks of any ``RuntimeJob`` registered with ``api=True``.

What is guaranteed, as far as another runtime allows: ``create_task`` writes the task and every
``enqueue`` event in one transaction and sends nothing before it committed, so no job is ever
sent without its event. Sending happens after, in batches; another runtime cannot take back
what it accepted, so a failure half way cannot be undone: the events of the jobs that were not
sent end ``error`` "not sent: <reason>" (the task ends, it is not left waiting for them) and
``JobsNotSent`` is raised. Until sent, the jobs are held in memory, one small entry per job.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Connection, Engine

from asynctask import payload
from asynctask.brokers import Staging
from asynctask.client import Client
from asynctask.db.engine import writer
from asynctask.errors import JobsNotSent
from asynctask.job import JobDefinition, JobOptions, JobSetter
from asynctask.registry import Registry, default_registry
from asynctask.tracking.apply import apply_transitions
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import Transition

logger = logging.getLogger("asynctask.tracking")

#: Jobs per call of ``Sender.send``.
SEND_BATCH = 500


@dataclass(frozen=True, slots=True)
class OutgoingJob:
    """One job to send. The runtime's own job or message id is ``jid``; the message carries
    ``task`` so that the worker side knows the job is tracked, and under which task."""

    jid: str
    task: str
    args: list[Any]


class PartlySent(Exception):
    """Only the first ``sent`` jobs of a batch were sent when ``cause`` stopped the rest."""

    def __init__(self, sent: int, cause: BaseException) -> None:
        super().__init__(f"{sent} sent, then: {cause}")
        self.sent = sent
        self.cause = cause


class Sender(Protocol):
    def send(self, jobs: Sequence[OutgoingJob]) -> None:
        """Send ``jobs`` in order. ``PartlySent`` tells how many went out before an error; any
        other exception means none of them did."""


class RuntimeJob(JobDefinition[Any]):
    """A job another runtime runs: ``create_task`` sends its chunks through ``sender``."""

    def __init__(
        self,
        func: Callable[..., Any],
        name: str,
        *,
        runtime: str,
        queue: str,
        sender: Sender,
        api: bool = True,
        item_schema: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(func, name, JobOptions(queue=queue), api=api, item_schema=item_schema)
        #: The runtime's name, as people know it ("celery", "rq", "dramatiq").
        self.runtime = runtime
        self.sender = sender

    def __repr__(self) -> str:
        return f"<{self.runtime} job {self.name} queue={self.options.queue}>"

    def set(self, *, client: Client | None = None, **options: Any) -> JobSetter:
        raise self._elsewhere()

    def perform_async(self, *args: Any) -> str:
        raise self._elsewhere()

    def perform_in(self, interval: float, *args: Any) -> str:
        raise self._elsewhere()

    def perform_at(self, when: float | datetime, *args: Any) -> str:
        raise self._elsewhere()

    def perform_bulk(self, args_list: Iterable[Sequence[Any]], batch_size: int = 1000) -> list[str]:
        raise self._elsewhere()

    def _elsewhere(self) -> TypeError:
        return TypeError(f"{self.name} runs on {self.runtime}: send it with {self.runtime}'s own client")

    def staging(self, engine: Engine, task_id: str) -> RuntimeStaging:
        return RuntimeStaging(self, engine, task_id)


class RuntimeStaging(Staging):
    """A task's jobs, kept until the task is committed, then sent through the runtime."""

    def __init__(self, job: RuntimeJob, engine: Engine, task_id: str) -> None:
        self.job = job
        self.engine = engine
        self.task_id = task_id
        self._pending: list[OutgoingJob] = []

    def encode(self, jobs: Sequence[payload.JobDict]) -> list[OutgoingJob]:
        return [OutgoingJob(item["jid"], self.task_id, list(item["args"])) for item in jobs]

    def write(self, encoded: Any, connection: Connection) -> None:
        self._pending.extend(encoded)

    def publish(self) -> int:
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), SEND_BATCH):
            batch = pending[start : start + SEND_BATCH]
            try:
                self.job.sender.send(batch)
            except PartlySent as exc:
                self._not_sent(pending, start + exc.sent, exc.cause)
            except Exception as exc:
                self._not_sent(pending, start, exc)
        return len(pending)

    def _not_sent(self, jobs: list[OutgoingJob], sent: int, cause: BaseException) -> None:
        reason = str(cause) or type(cause).__name__
        unsent = [job.jid for job in jobs[sent:]]
        logger.error(
            "task %s: %d job(s) not sent to %s: %s", self.task_id, len(unsent), self.job.runtime, reason
        )
        mark_not_sent(self.engine, unsent, reason)
        raise JobsNotSent(self.task_id, sent, len(jobs), reason) from cause

    def discard(self) -> None:
        self._pending = []


def mark_not_sent(engine: Engine, jids: Sequence[str], reason: str) -> None:
    """End the events of jobs that never reached their runtime: ``error`` "not sent: <reason>".

    Numbered 1, after the ``enqueue`` they were created with (0): nothing else is ever
    recorded for a job that was not sent.
    """
    at = datetime.now(UTC).timestamp()
    for start in range(0, len(jids), SEND_BATCH):
        batch = [
            Transition(jid, EventStatus.ERROR.value, at, f"not sent: {reason}", seq=1)
            for jid in jids[start : start + SEND_BATCH]
        ]
        with writer(engine).begin() as connection:
            apply_transitions(connection, batch)


_adapters: list[Callable[[object], RuntimeJob | None]] = []


def add_adapter(adapter: Callable[[object], RuntimeJob | None]) -> None:
    """Let ``create_task`` take another runtime's own job object (a Celery task, a Dramatiq
    actor): ``adapter`` returns its ``RuntimeJob``, or None for objects it does not know."""
    if adapter not in _adapters:
        _adapters.append(adapter)


def register(job: RuntimeJob, registry: Registry | None = None) -> RuntimeJob:
    """Make ``job`` known by name (``POST /api/tasks?job=NAME``, ``retry_task``)."""
    (default_registry if registry is None else registry).add(job)
    return job


def resolve(job: object, registry: Registry) -> JobDefinition[Any]:
    """The definition ``create_task`` was given, named, or handed as another runtime's job."""
    if isinstance(job, JobDefinition):
        return job
    if isinstance(job, str):
        return registry.get(job)
    for adapter in _iter_adapters():
        found = adapter(job)
        if found is not None:
            return found
    raise TypeError(
        f"create_task takes an AsyncTask job, its name, or a job of an attached runtime, not {job!r} "
        "(import asynctask.integrations.<runtime> to attach one)"
    )


def _iter_adapters() -> Iterator[Callable[[object], RuntimeJob | None]]:
    return iter(list(_adapters))
