"""AsyncTask tracking for Celery (5.3+): ``track(app)`` records the runs of an app's tasks that
were sent as an AsyncTask task's jobs; ``submittable(task)`` lets ``create_task`` and
``POST /api/tasks`` send a task's chunks through Celery's own client.

A message is tracked when it carries the AsyncTask task id in its ``asynctask_task`` header
(``create_task`` and ``retry_task`` set it; Celery keeps custom headers on retries). Other
messages run exactly as before.

How it attaches:

- ``__call__`` and ``retry`` of the app's task classes are wrapped (the app's base ``Task``, and
  the class of each task made from another base, before the worker builds its tracers). The
  wrapped ``__call__`` runs inside the pool process, around the task body: it records the
  start (or skips the body of a cancelled task's job with ``Ignore``, which Celery acknowledges
  and never retries), makes ``asynctask.current_job()`` work, and records how the body ended.
  The wrapped ``retry`` refuses to retry ``asynctask.JobFailed``, whatever ``autoretry_for``,
  ``max_retries`` or an explicit ``self.retry`` say: a business failure is final.
- What Celery decides in the worker's main process (a revoked or expired message, a hard time
  limit, a pool process lost) is recorded from its signals, for this app's tasks only.
- With late acknowledgement (``acks_late``) what a run recorded is written out (to Redis, see
  ``AttachedTracking.flush``) before the body returns, so before Celery acknowledges the
  message: a worker killed afterwards loses none of it, and one killed before leaves the
  message to be delivered again.
"""

from __future__ import annotations

import logging
import os
import select
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from weakref import WeakKeyDictionary, WeakValueDictionary

from celery import Celery, Task, signals
from celery.exceptions import Ignore, Reject, Retry, TimeLimitExceeded, WorkerLostError

from asynctask.errors import JobFailed
from asynctask.integrations.attached import AttachedTracking
from asynctask.middleware.runs import JobRun
from asynctask.registry import Registry
from asynctask.settings import Settings
from asynctask.tasks import runtime
from asynctask.tasks.runtime import OutgoingJob, PartlySent, RuntimeJob
from asynctask.tracking import rules, transitions
from asynctask.tracking.status import EventStatus

logger = logging.getLogger("asynctask.integrations.celery")

#: The message header that carries the AsyncTask task id of a tracked job.
HEADER = "asynctask_task"
#: The run of a tracked request, and whether its retry was recorded, kept on Celery's request.
_RUN = "_asynctask_run"
_RETRY = "_asynctask_retry_recorded"
#: Set on a task class whose ``__call__`` and ``retry`` are wrapped (inherited by subclasses).
_MARK = "_asynctask_app"

_attached: WeakKeyDictionary[Celery, AttachedTracking] = WeakKeyDictionary()
#: The attribute of a Celery task that holds the RuntimeJob ``submittable`` made of it.
_JOB = "_asynctask_job"
#: Seconds a revoke that terminated a run waits for its pool process to exit (see ``_exited``).
EXIT_WAIT = 2.0


def track(app: Celery, settings: Settings | None = None) -> AttachedTracking:
    """Attach AsyncTask tracking to ``app``'s tasks (this app only); returns the tracking.

    ``settings``: where tracking is written; None reads ``ASYNCTASK_*`` from the environment
    (``ASYNCTASK_REDIS_URL`` and ``ASYNCTASK_NAMESPACE`` for the stream, else the batched SQL
    writer; ``ASYNCTASK_DATABASE_URL``). Nothing is opened until a tracked job runs. Call it
    where the app is made, before the worker starts; calling it again returns the same tracking.
    """
    tracking = _attached.get(app)
    if tracking is not None:
        return tracking
    tracking = AttachedTracking(settings)
    _attached[app] = tracking
    _wrap(app.Task, app, tracking)
    if app.finalized:
        _wrap_tasks(app, tracking)
    else:
        app.on_after_finalize.connect(lambda sender, **_: _wrap_tasks(app, tracking), weak=False)
    _connect(app, tracking)
    return tracking


def _wrap_tasks(app: Celery, tracking: AttachedTracking) -> None:
    """Wrap the classes of tasks made from a base other than the app's ``Task``."""
    for task in list(app.tasks.values()):
        if task.app is app:
            _wrap(type(task), app, tracking)


def _wrap(cls: type[Task], app: Celery, tracking: AttachedTracking) -> None:
    if getattr(cls, _MARK, None) is app:
        return
    own_call = cls.__dict__.get("__call__")
    own_retry = cls.__dict__.get("retry")

    def call_next(task: Task, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if own_call is not None:
            return own_call(task, *args, **kwargs)
        return super(cls, task).__call__(*args, **kwargs)

    def __call__(task: Task, *args: Any, **kwargs: Any) -> Any:
        request = task.request
        task_id = None if request.called_directly else getattr(request, HEADER, None)
        if not isinstance(task_id, str):
            return call_next(task, args, kwargs)
        return _run(tracking, task, task_id, args, kwargs, call_next)

    def retry(task: Task, *args: Any, **kwargs: Any) -> Any:
        request = task.request
        run = None if request.called_directly else getattr(request, _RUN, None)
        if isinstance(run, JobRun):
            exc = kwargs.get("exc", args[2] if len(args) > 2 else None)
            cause = exc if isinstance(exc, BaseException) else sys.exception()
            if isinstance(cause, JobFailed):
                # A business failure is final: raised as it is, Celery records a failure.
                raise cause
            limit = kwargs.get("max_retries", args[6] if len(args) > 6 else None)
            limit = task.max_retries if limit is None else limit
            attempt = request.retries + 1
            # Celery's own test: past the limit it raises the exception instead of retrying.
            if limit is None or attempt <= limit:
                # Written before Celery sends the retry, so that the retry's own run, in
                # whatever process, is numbered after it: on the SQL writer path too, where
                # AttachedTracking.flush leaves the write to the writer thread.
                _waiting(run, cause, attempt, limit)
                if not run.tracker.send():
                    logger.warning(
                        "job %s: its retry is sent before its error is written (the store does not "
                        "answer); the retry's run may be recorded first",
                        run.jid,
                    )
                setattr(request, _RETRY, True)
        if own_retry is not None:
            return own_retry(task, *args, **kwargs)
        return super(cls, task).retry(*args, **kwargs)

    __call__.__qualname__ = f"{cls.__qualname__}.__call__"
    retry.__qualname__ = f"{cls.__qualname__}.retry"
    cls.__call__ = __call__
    cls.retry = retry
    setattr(cls, _MARK, app)


def _run(
    tracking: AttachedTracking,
    task: Task,
    task_id: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    call_next: Callable[[Task, tuple[Any, ...], dict[str, Any]], Any],
) -> Any:
    """One run of a tracked job, in the pool process, around its body."""
    request = task.request
    delivery = request.delivery_info or {}
    run = tracking.run(request.id, task_id, task.name, list(args), str(delivery.get("routing_key") or ""))
    if request.retries:
        # Sidekiq's count, as current_job().retry_count reports it: None on the first run.
        run.job["retry_count"] = request.retries - 1
    late = bool(task.acks_late)
    setattr(request, _RUN, run)
    if not run.start():
        _written(tracking, run, late)
        raise Ignore("its AsyncTask task was cancelled")
    # A worker killed from here on leaves the message to be delivered again: the start of
    # this run is out first, so the next one counts as another attempt.
    _written(tracking, run, late)
    with run:
        try:
            result = call_next(task, args, kwargs)
        except Retry as exc:
            if not getattr(request, _RETRY, False):
                # Raised without Task.retry (a Retry of the task's own making): it was sent already.
                _waiting(run, exc.exc if isinstance(exc.exc, BaseException) else exc, *_next_try(task))
            _written(tracking, run, late)
            raise
        except Ignore as exc:
            run.ended(EventStatus.FINISH, f"ended by the task: {_text(exc, 'ignored')}")
            _written(tracking, run, late)
            raise
        except Reject as exc:
            _rejected(run, exc)
            _written(tracking, run, late)
            raise
        except Exception as exc:
            run.raised(exc, retry=None)
            _written(tracking, run, late)
            raise
        run.finished()
    _written(tracking, run, late)
    return result


def _written(tracking: AttachedTracking, run: JobRun, late: bool) -> None:
    """Before Celery acknowledges a late-acknowledged message: what the run recorded is out."""
    if not late:
        return
    tracking.flush()
    if not tracking.settings.uses_redis:
        return
    # flush() finds nothing to write when the sender thread has just taken the transitions,
    # and returns while that thread is still writing them: wait for its write to end.
    outbox = run.tracker.outbox
    try:
        with outbox.draining(acknowledging=True) as taken:
            if taken:
                run.tracker.store.write_transitions(taken)
    except run.tracker.store.errors as exc:
        logger.warning("job %s: acknowledged before its tracking is written: %s", run.jid, exc)


def _waiting(run: JobRun, cause: BaseException | None, attempt: int, limit: int | None) -> None:
    """The run ended in a retry Celery will send: ``error`` and "waiting for retry n of m"."""
    if cause is None:
        # A retry asked for without an exception: nothing went wrong.
        run.ended(EventStatus.ENQUEUE, f"retry asked for; waiting for retry {attempt}" + _of(limit))
    elif limit is not None:
        run.raised(cause, retry=(attempt, limit))
    else:
        run.tracker.record(
            rules.errored(run.jid, cause),
            transitions.status(run.jid, EventStatus.ENQUEUE, f"waiting for retry {attempt}"),
        )


def _next_try(task: Task, request: Any = None) -> tuple[int, int | None]:
    """The retry that follows the current run: its number (from 1) and Celery's limit."""
    retries = (request or task.request).retries
    limit = task.max_retries
    return retries + 1, limit if isinstance(limit, int) else None


def _of(limit: int | None) -> str:
    return "" if limit is None else f" of {limit}"


def _rejected(run: JobRun, exc: Reject) -> None:
    reason = exc.reason
    if exc.requeue:
        run.ended(EventStatus.ERROR, f"rejected by the task: {_text(reason, 'no reason given')}")
        run.ended(EventStatus.ENQUEUE, "requeued by the task's Reject; it will run again")
    elif isinstance(reason, BaseException):
        run.raised(reason, retry=None)
    else:
        run.ended(EventStatus.ERROR, f"rejected by the task: {_text(reason, 'no reason given')}")


def _text(value: object, default: str) -> str:
    if isinstance(value, BaseException):
        value = rules.describe(value)
    text = str(value) if value is not None else ""
    return text or default


def _connect(app: Celery, tracking: AttachedTracking) -> None:
    """What the worker's main process decides about this app's tracked jobs."""

    def ours(sender: Any) -> bool:
        return getattr(sender, "app", None) is app

    def run_of(task: Any, request: Any) -> JobRun | None:
        task_id = getattr(request, HEADER, None)
        if not isinstance(task_id, str) or not isinstance(request.id, str):
            return None
        args = request.args
        return tracking.run(request.id, task_id, task.name, list(args) if args is not None else None)

    #: The requests of this app's tracked jobs that the worker holds, by Celery task id: a revoke
    #: that terminates one needs its pool process (see ``revoked``).
    held: WeakValueDictionary[str, Any] = WeakValueDictionary()

    def received(sender: Any = None, request: Any = None, **_: Any) -> None:
        if ours(getattr(request, "task", None)) and HEADER in request.request_dict:
            held[request.id] = request

    def worker_init(sender: Any = None, **_: Any) -> None:
        if ours(sender):
            _wrap_tasks(app, tracking)
            # This process applies the stream; the pool processes it forks only record.
            tracking.start()

    def revoked(
        sender: Any = None,
        request: Any = None,
        terminated: bool = False,
        signum: Any = None,
        expired: bool = False,
        **_: Any,
    ) -> None:
        run = run_of(sender, request) if ours(sender) else None
        if run is None:
            return
        if expired:
            run.ended(EventStatus.ERROR, "expired before it started")
        elif terminated:
            request_held = held.get(request.id)
            _exited(getattr(request_held, "worker_pid", None), run.jid)
            run.ended(EventStatus.CANCELLED, f"revoked; terminated by signal {signum}")
        else:
            run.ended(EventStatus.CANCELLED, "revoked")
        tracking.flush()

    def failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
        # Failures inside the body were recorded by the run itself; these two happen outside it.
        if not ours(sender) or not isinstance(exception, TimeLimitExceeded | WorkerLostError):
            return
        run = run_of(sender, sender.request)
        if run is None:
            return
        if isinstance(exception, TimeLimitExceeded):
            limit = exception.args[0] if exception.args else None
            after = f" ({limit:g} s)" if isinstance(limit, int | float) else ""
            run.ended(EventStatus.ERROR, f"time limit exceeded{after}; its process was killed")
        else:
            run.raised(exception, retry=None)
        tracking.flush()

    def lost_and_retried(sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
        # A retry the main process sends (retry_on_worker_lost); the body's own go through the run.
        if not ours(sender) or not isinstance(getattr(reason, "exc", None), WorkerLostError):
            return
        run = run_of(sender, request)
        if run is None:
            return
        _waiting(run, reason.exc, *_next_try(sender, request))
        tracking.flush()

    def process_shutdown(**_: Any) -> None:
        tracking.close()

    signals.task_received.connect(received, weak=False)
    signals.worker_init.connect(worker_init, weak=False)
    signals.task_revoked.connect(revoked, weak=False)
    signals.task_failure.connect(failure, weak=False)
    signals.task_retry.connect(lost_and_retried, weak=False)
    signals.worker_process_shutdown.connect(process_shutdown, weak=False)
    signals.worker_shutdown.connect(process_shutdown, weak=False)


def _exited(pid: int | None, jid: str) -> None:
    """Wait for the pool process ``pid`` that a revoke just signalled to exit.

    The process writes what the run recorded and had not written yet (its start among them) as
    it exits: the end recorded after this is then numbered after it, and stays the job's status.
    """
    if pid is None or not hasattr(os, "pidfd_open"):
        return
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        # The handle turns readable when the process has exited (poll: any descriptor number).
        exited = select.poll()
        exited.register(handle, select.POLLIN)
        readable = exited.poll(EXIT_WAIT * 1000)
    finally:
        os.close(handle)
    if not readable:
        logger.warning(
            "job %s: its pool process %d has not exited %.0f s after the revoke; its cancel is "
            "recorded now, and a start it writes later may show the job working",
            jid,
            pid,
            EXIT_WAIT,
        )


class CelerySender:
    """Sends a task's jobs with ``apply_async`` on one producer (one connection) per batch:
    the job's jid is Celery's task id, the AsyncTask task id travels in the ``asynctask_task``
    header.

    What counts as sent is what the producer's publish returned from. On Redis that is a
    message in the queue; on RabbitMQ a publish is only known to have arrived with publisher
    confirms (``broker_transport_options={"confirm_publish": True}``).
    """

    def __init__(self, task: Task) -> None:
        self.task = task

    def send(self, jobs: Sequence[OutgoingJob]) -> None:
        sent = 0
        try:
            with self.task.app.producer_or_acquire() as producer:
                for job in jobs:
                    headers = {} if job.task is None else {HEADER: job.task}
                    self.task.apply_async(args=job.args, task_id=job.jid, headers=headers, producer=producer)
                    sent += 1
        except Exception as exc:
            if sent:
                raise PartlySent(sent, exc) from exc
            raise


def _expired_reach_a_worker(headers: Any = None, properties: Any = None, **_: Any) -> None:
    """A tracked message keeps its ``expires`` but loses the broker-side ``expiration`` Celery
    derives from it. RabbitMQ drops a message past its expiration without any worker seeing it:
    its job would wait in ``enqueue`` forever. A worker checks ``expires`` itself and revokes an
    expired job (``task_revoked``: ``error`` "expired before it started"), as it does on Redis,
    which has no per-message expiry."""
    if isinstance(headers, dict) and HEADER in headers and isinstance(properties, dict):
        properties.pop("expiration", None)


# Connected at import, for every message this process sends: a retry that Celery sends of a
# tracked job carries the header too.
signals.before_task_publish.connect(_expired_reach_a_worker, weak=False)


def runtime_job(
    task: Task, *, name: str | None = None, api: bool = True, item_schema: Mapping[str, Any] | None = None
) -> RuntimeJob:
    """The ``RuntimeJob`` of a Celery task, not registered anywhere."""
    queue = getattr(task, "queue", None) or task.app.conf.task_default_queue
    return RuntimeJob(
        task.run,
        name or task.name,
        runtime="celery",
        queue=str(queue),
        sender=CelerySender(task),
        api=api,
        item_schema=item_schema,
    )


def submittable(
    task: Task,
    *,
    name: str | None = None,
    api: bool = True,
    item_schema: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
) -> RuntimeJob:
    """Register ``task`` so that ``create_task`` and ``retry_task`` send its chunks through
    Celery, and (``api``) ``POST /api/tasks?job=NAME`` creates tasks of it. ``name`` defaults
    to the task's Celery name; ``registry`` to AsyncTask's default registry."""
    job = runtime.register(runtime_job(task, name=name, api=api, item_schema=item_schema), registry)
    setattr(task, _JOB, job)
    return job


def _adapt(job: object) -> RuntimeJob | None:
    if not isinstance(job, Task):
        return None
    known = getattr(job, _JOB, None)
    return known if isinstance(known, RuntimeJob) else runtime_job(job, api=False)


runtime.add_adapter(_adapt)
