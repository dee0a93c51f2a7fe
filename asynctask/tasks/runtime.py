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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from asynctask.job import JobDefinition, JobSetter
from asynctask.job_spec import JobOptions, JobSpec
from asynctask.registry import Registry, default_registry

if TYPE_CHECKING:
    from asynctask.async_client import AsyncClient
    from asynctask.client import Client

#: Jobs per call of ``Sender.send``.
SEND_BATCH = 500


@dataclass(frozen=True, slots=True)
class OutgoingJob:
    """One job to send. The runtime's own job or message id is ``jid``; the message carries
    ``task`` so that the worker side knows the job is tracked, and under which task (None: a
    task's callback, which runs untracked)."""

    jid: str
    task: str | None
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

    def set(self, *, client: Client | AsyncClient | None = None, **options: Any) -> JobSetter:
        raise self._elsewhere()

    def perform_async(self, *args: Any) -> str:
        raise self._elsewhere()

    def perform_in(self, interval: float, *args: Any) -> str:
        raise self._elsewhere()

    def perform_at(self, when: float | datetime, *args: Any) -> str:
        raise self._elsewhere()

    def perform_bulk(self, args_list: Iterable[Sequence[Any]], batch_size: int = 1000) -> list[str]:
        raise self._elsewhere()

    async def aperform_async(self, *args: Any) -> str:
        raise self._elsewhere()

    async def aperform_in(self, interval: float, *args: Any) -> str:
        raise self._elsewhere()

    async def aperform_at(self, when: float | datetime, *args: Any) -> str:
        raise self._elsewhere()

    async def aperform_bulk(self, args_list: Iterable[Sequence[Any]], batch_size: int = 1000) -> list[str]:
        raise self._elsewhere()

    def _elsewhere(self) -> TypeError:
        return TypeError(f"{self.name} runs on {self.runtime}: send it with {self.runtime}'s own client")


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


def resolve(job: object, registry: Registry) -> JobSpec[Any]:
    """The definition ``create_task`` was given, named, or handed as another runtime's job."""
    if isinstance(job, JobSpec):
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
