"""``Tracking``: the task API in one object (an engine plus a client), and the default one.

``asynctask.create_task(...)``, ``get_task(...)`` and the rest use ``default_tracking()``:
the default client (``asynctask.configure``) and ``ASYNCTASK_DATABASE_URL``.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, Unpack

from sqlalchemy import Engine

from asynctask.client import Client, default_client
from asynctask.db.engine import create_database_engine
from asynctask.feeds import FeedChange, FeedState
from asynctask.job import JobDefinition
from asynctask.settings import Settings
from asynctask.tasks import creation, jobs, listeners, runtime
from asynctask.tasks import operations as tasks
from asynctask.tasks.feedview import with_held
from asynctask.tasks.options import TaskFields, TaskOptions
from asynctask.tasks.queue_place import with_ahead
from asynctask.tasks.runtime import RuntimeJob
from asynctask.tasks.steps import TaskStep, linked
from asynctask.tracking import queries
from asynctask.tracking.views import EventView, FailedItemView, Page, TaskView


class Tracking:
    def __init__(
        self, client: Client | None = None, engine: Engine | None = None, settings: Settings | None = None
    ) -> None:
        self.client = client if client is not None else default_client()
        settings = settings or self.client.settings
        self.engine = engine if engine is not None else create_database_engine(settings.database_url)
        #: How a call waits (``cancel_task``, for another runtime's workers): an event loop's
        #: tracking awaits instead.
        self.sleep: Callable[[float], None] = time.sleep
        #: Whether tasks of another runtime's jobs are sent here, with that runtime's own client,
        #: which blocks: an event loop's tracking refuses them.
        self.sends_elsewhere = True

    def create_task(
        self,
        job: JobDefinition[Any] | str | object,
        items: Iterable[Any],
        options: TaskOptions | None = None,
        **given: Unpack[TaskFields],
    ) -> TaskView:
        """Split ``items`` into jobs under one task, all or nothing (``creation.create_task``).
        ``options`` (a ``TaskOptions``) and the keyword arguments (its fields, on top) say how.

        When no live worker process listens to the task's queue, the view's ``warnings`` say so
        and a warning is logged (logger ``asynctask``): its jobs wait until a worker starts."""
        chosen = (options or TaskOptions()).merged(given)
        definition = runtime.resolve(job, self.client.registry)
        elsewhere = definition if isinstance(definition, RuntimeJob) else None
        if elsewhere is not None and not self.sends_elsewhere:
            raise tasks.sent_blocking(elsewhere.runtime)
        task_id = creation.create_task(
            self.engine,
            self.client,
            job,
            items,
            chosen,
        )
        view = self.get_task(task_id)
        if elsewhere is not None:
            # Another runtime's workers are not AsyncTask's to see.
            return view
        warning = listeners.no_worker(self.client, view.queue)
        if warning is None:
            return view
        listeners.logger.warning("task %s: %s", task_id, warning.message)
        return replace(view, warnings=(warning,))

    def chain(self, *steps: TaskStep, run_if: Literal["success", "complete"] = "success") -> list[TaskView]:
        """Create a line of tasks, each waiting for the one before (``after``, ``run_if``), in
        order; return their views. Each is created as ``create_task`` creates one: a step that
        is refused raises, and the tasks created before it stay (they run, and nothing waits
        for them)."""
        views: list[TaskView] = []
        for current in steps:
            options = current.options if not views else linked(views[-1].id, current, run_if)
            views.append(self.create_task(current.job, current.items, options))
        return views

    def get_task(self, task_id: str, *, tenant: str | None = None, errors: int = 10) -> TaskView:
        with self.engine.connect() as connection:
            view = queries.get_task(connection, task_id, tenant=tenant, errors=errors)
            return with_ahead(with_held(view, self.client), self.client, connection)

    def list_events(
        self,
        task_id: str,
        *,
        status: str | None = None,
        after: str | int | None = None,
        limit: int = 100,
        tenant: str | None = None,
        messages: bool = True,
    ) -> Page[EventView]:
        with self.engine.connect() as connection:
            return queries.list_events(
                connection, task_id, status=status, after=after, limit=limit, tenant=tenant, messages=messages
            )

    def list_failed_items(
        self, task_id: str, *, after: str | int | None = None, limit: int = 100, tenant: str | None = None
    ) -> Page[FailedItemView]:
        """The items that failed in the task's jobs (``asynctask.each``), oldest first."""
        with self.engine.connect() as connection:
            return queries.list_failed_items(connection, task_id, after=after, limit=limit, tenant=tenant)

    def list_tasks(
        self, tenant: str | None, *, before: str | None = None, limit: int = 50, every_tenant: bool = False
    ) -> Page[TaskView]:
        with self.engine.connect() as connection:
            return queries.list_tasks(
                connection, tenant, before=before, limit=limit, every_tenant=every_tenant
            )

    def cancel_task(self, task_id: str, *, tenant: str | None = None) -> TaskView:
        tasks.cancel_task(self.engine, self.client, task_id, tenant=tenant, sleep=self.sleep)
        return self.get_task(task_id)

    def retry_task(self, task_id: str, *, tenant: str | None = None) -> int:
        """Re-enqueue the task's failed and error jobs; return how many (counts follow within a flush)."""
        return tasks.retry_task(
            self.engine, self.client, task_id, tenant=tenant, sends_elsewhere=self.sends_elsewhere
        )

    def update_task(
        self,
        task_id: str,
        *,
        parallel: int | None = None,
        interval: float | None = None,
        priority: int | None = None,
        tenant: str | None = None,
    ) -> FeedState | None:
        """Tune a fed task while it runs: None leaves a setting as it is."""
        change = FeedChange(parallel=parallel, interval=interval, priority=priority)
        return tasks.update_task(self.engine, self.client, task_id, change, tenant=tenant)

    def pause_task(self, task_id: str, *, tenant: str | None = None) -> FeedState | None:
        """Release no more of a fed task's jobs (running ones finish) until ``resume_task``."""
        return tasks.update_task(self.engine, self.client, task_id, FeedChange(paused=True), tenant=tenant)

    def resume_task(self, task_id: str, *, tenant: str | None = None) -> FeedState | None:
        return tasks.update_task(self.engine, self.client, task_id, FeedChange(paused=False), tenant=tenant)

    def stop_job(self, jid: str, *, tenant: str | None = None) -> jobs.StopState:
        """Stop a resumable job: parked now if it waits, at its next checkpoint if it runs."""
        return jobs.stop_job(self.engine, self.client, jid, tenant=tenant)

    def resume_job(self, jid: str, *, tenant: str | None = None) -> str:
        """Send a stopped job back to its queue, to continue from its checkpoint; its queue."""
        return jobs.resume_job(self.engine, self.client, jid, tenant=tenant)


_lock = threading.Lock()
_default: Tracking | None = None


def default_tracking() -> Tracking:
    global _default
    with _lock:
        client = default_client()
        if _default is None or _default.client is not client:
            _default = Tracking(client)
        return _default


P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])


def named_like(function: F, name: str, like: Callable[..., Any], *, bound: bool = False) -> F:
    """``function``, named ``name``, with the docstring and the parameters of the method it
    stands for (``bound``: less its ``self``), so that ``help()`` shows them."""
    function.__name__ = function.__qualname__ = name
    function.__doc__ = like.__doc__
    signature = inspect.signature(like)
    if bound:
        signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    function.__signature__ = signature  # type: ignore[attr-defined]
    return function


def _on_default(call: Callable[Concatenate[Tracking, P], R]) -> Callable[P, R]:
    def on_default(*args: P.args, **kwargs: P.kwargs) -> R:
        return call(default_tracking(), *args, **kwargs)

    return named_like(on_default, call.__name__, call, bound=True)


create_task = _on_default(Tracking.create_task)
chain = _on_default(Tracking.chain)
get_task = _on_default(Tracking.get_task)
list_events = _on_default(Tracking.list_events)
list_failed_items = _on_default(Tracking.list_failed_items)
list_tasks = _on_default(Tracking.list_tasks)
cancel_task = _on_default(Tracking.cancel_task)
retry_task = _on_default(Tracking.retry_task)
update_task = _on_default(Tracking.update_task)
pause_task = _on_default(Tracking.pause_task)
resume_task = _on_default(Tracking.resume_task)
stop_job = _on_default(Tracking.stop_job)
resume_job = _on_default(Tracking.resume_job)
