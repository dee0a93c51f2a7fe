"""AsyncTask tracking for Dramatiq (1.17 and 2.x): a broker middleware, and task submission
through Dramatiq's own client.

Attach it where the broker is set up, in the module that every worker and sender imports::

    broker.add_middleware(asynctask.integrations.dramatiq.Tracking())

A message is tracked when its options carry the AsyncTask task id (``asynctask_task``), which
``create_task`` puts there; every other message is left alone. Its run follows AsyncTask's own
status rules (``JobRun``): ``working``, ``finish``; ``asynctask.JobFailed`` is ``failed`` and
never retried; any other exception is ``error``, then ``enqueue`` "waiting for retry n of m"
exactly when the ``Retries`` middleware is about to retry it, else "no retries left". A message
whose task was cancelled is skipped (``SkipMessage``) and recorded ``cancelled``.

Why the hooks sit where they do: Dramatiq runs ``after_*`` hooks in the reverse order of the
middleware list, so this middleware, added last, sees the outcome before ``Retries`` acts on
it. The transitions are therefore written before a retry is enqueued (no retry can start
before its ``error`` is recorded), and they are flushed before the worker acknowledges the
message (Dramatiq acknowledges after the hooks), so a worker killed after an acknowledgement
loses nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import dramatiq
from dramatiq import Actor, Broker, Middleware
from dramatiq.broker import MessageProxy
from dramatiq.middleware import Retries, SkipMessage, TimeLimit, TimeLimitExceeded

from asynctask.errors import JobFailed
from asynctask.integrations.attached import AttachedTracking
from asynctask.middleware.runs import JobRun
from asynctask.registry import Registry, default_registry
from asynctask.settings import Settings
from asynctask.tasks.runtime import OutgoingJob, PartlySent, RuntimeJob, add_adapter
from asynctask.tracking.status import EventStatus

__all__ = ["TASK_OPTION", "ActorSender", "Tracking", "flusher_process", "runtime_job", "submittable"]

logger = logging.getLogger("asynctask.integrations.dramatiq")

#: The message option that carries the AsyncTask task id of a tracked message.
TASK_OPTION = "asynctask_task"

FAILED_BEFORE_START = "a middleware failed the message before it started"

#: Dramatiq 1.17.0 read a message's ``max_retries`` with ``or``: a message option of 0 fell
#: back to the actor's. Later versions take the message option as it is.
_ZERO_MAX_RETRIES_IGNORED = dramatiq.__version__ == "1.17.0"


@dataclass
class _Current:
    """The tracked message a worker thread is processing."""

    message_id: str
    run: JobRun
    #: Whether the run was entered (``current_job()`` set for the actor): not when it was skipped.
    entered: bool


class Tracking(Middleware):
    """Records the runs of tracked messages; see the module's documentation.

    ``settings``: AsyncTask's settings (None: from the environment, ``ASYNCTASK_*``). Nothing
    connects before the first tracked message of a process.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.tracking = AttachedTracking(settings)
        self._local = threading.local()

    # --- JobFailed is never retried -----------------------------------------------------

    def after_declare_actor(self, broker: Broker, actor: Actor[Any, Any] | str) -> None:
        # Dramatiq 1.x hands existing actors' names to a middleware added later, 2.x the actors.
        declared = broker.get_actor(actor) if isinstance(actor, str) else actor
        # Retries (and the worker's log) read ``throws`` before any retry setting: an exception
        # listed there is never retried, whatever max_retries or retry_when say.
        throws = declared.options.get("throws")
        if throws is None:
            declared.options["throws"] = JobFailed
        elif not _catches(throws, JobFailed):
            declared.options["throws"] = (*(throws if isinstance(throws, tuple) else (throws,)), JobFailed)

    # --- a tracked message's run --------------------------------------------------------

    def before_process_message(self, broker: Broker, message: MessageProxy) -> None:
        task = message.options.get(TASK_OPTION)
        if not isinstance(task, str) or message.failed:
            # Not tracked, or failed by a middleware before this one: the actor will not run
            # (recorded in ``after_process_message``).
            return
        run = self.tracking.run(message.message_id, task, message.actor_name, list(message.args))
        # Known to the after hooks before anything is recorded: a time limit may interrupt
        # this hook, and the worker then calls them with its exception.
        current = self._local.current = _Current(message.message_id, run, entered=False)
        if not run.start():
            raise SkipMessage(f"task {task} was cancelled")
        run.__enter__()
        current.entered = True

    def after_process_message(
        self,
        broker: Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        current = self._take(message)
        if current is None:
            if message.failed and isinstance(message.options.get(TASK_OPTION), str):
                self._not_run(message, FAILED_BEFORE_START)
            return
        try:
            if exception is not None:
                retry = _retry(broker, message, exception)
                current.run.raised(_described(broker, message, exception), retry=retry)
            elif message.failed:
                current.run.ended(EventStatus.ERROR, f"not run: {FAILED_BEFORE_START}")
            else:
                current.run.finished()
        finally:
            self._leave(current)

    def after_skip_message(self, broker: Broker, message: MessageProxy) -> None:
        current = self._take(message)
        if current is None:
            if isinstance(message.options.get(TASK_OPTION), str):
                self._not_run(message, _skip_reason(message))
            return
        try:
            if current.entered:
                # Started, then skipped by a middleware added after this one.
                current.run.ended(EventStatus.ERROR, f"not run: {_skip_reason(message)}")
        finally:
            self._leave(current)

    def after_worker_shutdown(self, broker: Broker, worker: dramatiq.Worker) -> None:
        # Dramatiq's worker processes end with os._exit: atexit handlers never run there.
        self.tracking.close()

    def _take(self, message: MessageProxy) -> _Current | None:
        """This thread's run of ``message``, forgotten here: a hook interrupted by a time limit
        that fires in it is called again by Dramatiq, and must not record twice."""
        current: _Current | None = getattr(self._local, "current", None)
        if current is None or current.message_id != message.message_id:
            return None
        self._local.current = None
        return current

    def _leave(self, current: _Current) -> None:
        if current.entered:
            current.run.__exit__(None, None, None)
        self.tracking.flush()

    def _not_run(self, message: MessageProxy, reason: str) -> None:
        """A tracked message that another middleware kept from running (an age limit, an abort)."""
        run = self.tracking.run(
            message.message_id, message.options[TASK_OPTION], message.actor_name, list(message.args)
        )
        run.ended(EventStatus.ERROR, f"not run: {reason}")
        self.tracking.flush()


def _catches(throws: Any, exc_type: type[BaseException]) -> bool:
    classes = throws if isinstance(throws, tuple) else (throws,)
    return any(isinstance(cls, type) and issubclass(exc_type, cls) for cls in classes)


def _skip_reason(message: MessageProxy) -> str:
    # The worker keeps a skip's exception on the message only when the message also failed.
    exc = getattr(message, "_exception", None)
    return str(exc) if isinstance(exc, SkipMessage) and str(exc) else "skipped by a middleware"


def _described(broker: Broker, message: MessageProxy, exception: BaseException) -> BaseException:
    """The exception as recorded: Dramatiq raises ``TimeLimitExceeded`` without a word, so the
    record says which limit it was."""
    if type(exception) is not TimeLimitExceeded:
        return exception
    limit = _time_limit_ms(broker, message)
    text = "time limit exceeded" if limit is None else f"time limit of {limit / 1000:g} s exceeded"
    return TimeLimitExceeded(text)


def _time_limit_ms(broker: Broker, message: MessageProxy) -> float | None:
    """The limit the TimeLimit middleware applied, read as it reads it."""
    middleware = next((m for m in broker.middleware if isinstance(m, TimeLimit)), None)
    if middleware is None:
        return None
    actor = broker.get_actor(message.actor_name)
    limit = message.options.get("time_limit") or actor.options.get("time_limit", middleware.time_limit)
    return float(limit) if isinstance(limit, int | float) else None


def _retry(broker: Broker, message: MessageProxy, exception: BaseException) -> tuple[int, int] | None:
    """(n, m) when the Retries middleware is about to retry the message as its n-th retry of m;
    None when it will not. The same reading of the same options as ``Retries``, which runs
    after this middleware and has not counted this failure yet."""
    retries = next((m for m in broker.middleware if isinstance(m, Retries)), None)
    if retries is None:
        return None
    actor = broker.get_actor(message.actor_name)
    throws = message.options.get("throws") or actor.options.get("throws")
    if throws and isinstance(exception, throws):
        return None
    done = int(message.options.get("retries", 0))
    max_retries = message.options.get("max_retries")
    if max_retries is None or (_ZERO_MAX_RETRIES_IGNORED and not max_retries):
        max_retries = actor.options.get("max_retries", retries.max_retries)
    retry_when: Callable[[int, BaseException], bool] | None
    retry_when = actor.options.get("retry_when", retries.retry_when)
    if retry_when is not None:
        try:
            again = bool(retry_when(done, exception))
        except Exception:
            # Retries calls it next and fails the same way: Dramatiq logs that, and the
            # message is acknowledged without a retry.
            logger.warning("retry_when of %s raised: no retry", message.actor_name, exc_info=True)
            return None
    else:
        again = max_retries is None or done < max_retries
    if not again:
        return None
    return done + 1, max_retries


def flusher_process() -> int:
    """Apply AsyncTask's tracking stream to SQL in a process of its own, which Dramatiq's main
    process starts and stops: ``dramatiq app --fork asynctask.integrations.dramatiq:flusher_process``
    with ``ASYNCTASK_FLUSHER=off`` for the workers. The SQL work then runs beside the worker
    processes instead of in each of them, holding their GIL. Settings come from the
    environment (the fork never imports the application)."""
    settings = replace(Settings.from_env(), flusher="thread")
    tracking = AttachedTracking(settings)
    tracking.start()
    try:
        # Dramatiq stops a fork with SIGTERM, which its handler turns into SystemExit here.
        threading.Event().wait()
    finally:
        tracking.close()
    return 0


# --- submission --------------------------------------------------------------------------


class ActorSender:
    """Sends a task's chunk jobs as messages of ``actor``, one ``broker.enqueue`` each (the
    broker's middleware sees each message, as with ``actor.send``); the message id is the
    job's jid."""

    def __init__(self, actor: Actor[Any, Any]) -> None:
        self.actor = actor

    def send(self, jobs: Sequence[OutgoingJob]) -> None:
        broker = self.actor.broker
        for sent, job in enumerate(jobs):
            options: dict[str, Any] = {} if job.task is None else {TASK_OPTION: job.task}
            message = self.actor.message_with_options(args=tuple(job.args), **options)
            try:
                broker.enqueue(message.copy(message_id=job.jid))
            except Exception as exc:
                if sent == 0:
                    raise
                raise PartlySent(sent, exc) from exc


#: Each actor's job, made once: the registry refuses a second job of one name and function.
_jobs: dict[Actor[Any, Any], RuntimeJob] = {}
_jobs_lock = threading.Lock()


def _job_of(actor: Actor[Any, Any], make: Callable[[], RuntimeJob]) -> RuntimeJob:
    with _jobs_lock:
        job = _jobs.get(actor)
        if job is None:
            job = _jobs[actor] = make()
        return job


def runtime_job(actor: Actor[Any, Any], registry: Registry | None = None) -> RuntimeJob:
    """The ``RuntimeJob`` of ``actor``, registered (under the actor's name, or the name
    ``submittable`` gave it) so that ``retry_task`` finds its sender."""
    job = _job_of(actor, lambda: _runtime_job(actor, actor.actor_name, api=False, item_schema=None))
    _register(job, registry)
    return job


def submittable(
    actor: Actor[Any, Any],
    *,
    name: str | None = None,
    api: bool = True,
    item_schema: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
) -> Actor[Any, Any]:
    """Register ``actor`` for ``POST /api/tasks?job=NAME`` (``name``: the actor's name by
    default) and for ``retry_task``; returns the actor."""
    job = _runtime_job(actor, name or actor.actor_name, api=api, item_schema=item_schema)
    _register(job, registry)
    with _jobs_lock:
        _jobs[actor] = job
    return actor


def _register(job: RuntimeJob, registry: Registry | None) -> None:
    target = default_registry if registry is None else registry
    existing = target.get(job.name) if job.name in target else None
    if isinstance(existing, RuntimeJob) and existing.runtime == "dramatiq" and existing is not job:
        # An actor declared again under its name replaces the first in Dramatiq: its job
        # replaces the first one's here. Any other job of that name is refused by ``add``.
        target.remove(job.name)
    target.add(job)


def _runtime_job(
    actor: Actor[Any, Any], name: str, *, api: bool, item_schema: Mapping[str, Any] | None
) -> RuntimeJob:
    return RuntimeJob(
        actor.fn,
        name,
        runtime="dramatiq",
        queue=actor.queue_name,
        sender=ActorSender(actor),
        api=api,
        item_schema=item_schema,
    )


def _adapt(obj: object) -> RuntimeJob | None:
    return runtime_job(obj) if isinstance(obj, Actor) else None


add_adapter(_adapt)
