"""AsyncTask tracking for RQ (2.x): ``rq worker -w asynctask.integrations.rq.TrackedWorker``.

A job whose ``meta`` names an AsyncTask task (``TASK_META``, set by the sender of
``submittable``) is tracked; every other job runs exactly as under RQ's own worker.

Where each transition is recorded, and why there:

- RQ's default worker forks a work horse per job, which exits with ``os._exit``: anything
  still buffered there is dropped. So the horse writes what it recorded to the tracking
  store twice: after ``working``, before the job's code runs (a horse killed later still
  leaves its attempt counted), and after the outcome (``finish``, ``failed``, ``error`` with
  RQ's retry decision, a time limit), *before* RQ's own bookkeeping reports the job done,
  failed or requeued (``handle_job_success`` / ``handle_job_failure`` / ``handle_job_retry``).
- The worker process records what only it sees, through RQ's hooks there, and writes it
  before RQ acts on it: a job stopped with ``send_stop_job_command`` (``cancelled``), a horse
  that died (``error`` "worker lost", then what RQ decides), and abandoned jobs its
  maintenance finds in a started-job registry (the same). It also applies the tracking
  stream to SQL (``AttachedTracking.start``); its horses never do.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis
from rq import Queue, Retry
from rq.exceptions import AbandonedJobError
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.timeouts import JobTimeoutException
from rq.worker import SimpleWorker, SpawnWorker, Worker
from rq.worker.base import BaseWorker

from asynctask.errors import JobFailed
from asynctask.integrations.attached import AttachedTracking
from asynctask.middleware.runs import JobRun
from asynctask.tasks.runtime import OutgoingJob, RuntimeJob, add_adapter, register
from asynctask.tracking import rules, transitions
from asynctask.tracking.status import EventStatus

logger = logging.getLogger("asynctask.integrations.rq")

#: The ``job.meta`` key that names the AsyncTask task of a tracked job.
TASK_META = "asynctask_task"
#: The ``job.meta`` key holding the ``Retry(max=...)`` a job was sent with: RQ itself only keeps
#: the retries left, and "waiting for retry n of m" needs m.
RETRIES_META = "asynctask_retries"
#: The runtime name a ``RuntimeJob`` of this module carries.
RUNTIME = "rq"
#: Where ``submittable`` sends without a connection and ``RQ_REDIS_URL``: RQ's own default.
DEFAULT_REDIS_URL = "redis://localhost:6379/0"

_default_tracking: AttachedTracking | None = None


def default_tracking() -> AttachedTracking:
    """The tracking every ``TrackedWorker`` of this process uses unless given its own
    (``Settings.from_env()``: ``ASYNCTASK_REDIS_URL``, ``ASYNCTASK_DATABASE_URL``, ...)."""
    global _default_tracking
    if _default_tracking is None:
        _default_tracking = AttachedTracking()
    return _default_tracking


def task_of(job: Job) -> str | None:
    """The AsyncTask task ``job`` belongs to, or None when the job is not tracked."""
    task = job.meta.get(TASK_META) if isinstance(job.meta, dict) else None
    return task if isinstance(task, str) else None


def _retries(job: Job) -> tuple[int, int] | None:
    """(retries already run, retries it was sent with) for a job sent with a ``Retry``."""
    left = job.retries_left
    sent = job.meta.get(RETRIES_META)
    if left is None or not isinstance(sent, int) or isinstance(sent, bool) or sent < left:
        return None
    return sent - left, sent


def next_retry(job: Job) -> tuple[int, int] | None:
    """(n, m) when RQ will retry ``job`` after this failure as its n-th retry of m; None when it
    will not. Read before RQ decrements ``retries_left``."""
    left = job.retries_left
    if left is None or left <= 0:
        return None
    known = _retries(job)
    # A job sent without the count (enqueued by hand with the task's meta): the retries left
    # are all that is known, so each retry reads as the first of them.
    done, total = known if known is not None else (0, left)
    return done + 1, total


class TrackingWorkerMixin(BaseWorker):
    """The tracking half of ``TrackedWorker``; mix it before any RQ worker class
    (``class MyWorker(TrackingWorkerMixin, HerokuWorker)``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if issubclass(cls, SpawnWorker):
            # Its work horse is a new interpreter that builds a plain rq.Worker: the jobs would
            # run untracked and their events wait in "enqueue" forever.
            raise TypeError(f"{cls.__name__}: RQ's SpawnWorker cannot be tracked; use Worker or SimpleWorker")

    def __init__(self, *args: Any, tracking: AttachedTracking | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tracking = tracking if tracking is not None else default_tracking()
        #: The tracked job this process is running, and what it raised.
        self._run: JobRun | None = None
        self._raised: BaseException | None = None
        #: How the last work horse that died ended (its wait status), until recorded.
        self._horse_status: int | None = None
        # First: an exception handler of the user's that returns False stops the ones after it,
        # and an abandoned job's "worker lost" must be recorded whatever the user's handlers do.
        self._exc_handlers.insert(0, self._record_abandoned)

    def work(self, *args: Any, **kwargs: Any) -> bool:
        # This process applies the tracking stream to SQL; the work horses it forks only record,
        # and perform_job writes what they recorded when each job starts and ends.
        self.tracking.start(forks_per_job=True, connection=self.connection)
        return super().work(*args, **kwargs)

    def execute_job(self, job: Job, queue: Queue) -> None:
        if task_of(job) is not None:
            self.tracking.before_fork()
        super().execute_job(job, queue)

    def teardown(self) -> None:
        try:
            super().teardown()  # type: ignore[no-untyped-call]
        finally:
            self.tracking.close()

    def _run_of(self, job: Job, task: str) -> JobRun:
        run = self.tracking.run(job.id, task, job.func_name or job.id, list(job.args), job.origin)
        retries = _retries(job)
        if retries is not None and retries[0] > 0:
            # current_job().retry_count: None on the first run, then 0, 1, ... (Sidekiq's count).
            run.job["retry_count"] = retries[0] - 1
        return run

    # --- in the work horse (in the worker itself for SimpleWorker) -------------------------

    def perform_job(self, job: Job, queue: Queue) -> bool:
        task = task_of(job)
        if task is None:
            return super().perform_job(job, queue)
        run = self._run_of(job, task)
        started = run.start()
        # Written before the job's code runs: a horse killed at any moment after this still
        # leaves its start counted (the attempt of the run RQ then retries or fails).
        self.tracking.flush()
        if not started:
            self._skip_cancelled(job, queue)
            return False
        self._run, self._raised = run, None
        try:
            with run:
                return super().perform_job(job, queue)
        finally:
            self._run = self._raised = None

    def _skip_cancelled(self, job: Job, queue: Queue) -> None:
        """End a job of a cancelled task without running it: RQ sees it cancelled (in its
        CanceledJobRegistry), neither retried nor failed."""
        with self.connection.pipeline() as pipeline:
            job.cancel(pipeline=pipeline)
            self.cleanup_execution(job, pipeline=pipeline)
            # The dequeue moved the job to the queue's intermediate list; RQ's own start of a
            # job takes it out of there (prepare_job_execution), which a skipped job never reaches.
            pipeline.lrem(queue.intermediate_queue_key, 1, job.id)
            pipeline.execute()
        logger.info("job %s of cancelled task %s not run", job.id, task_of(job))

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        if self._current(job) is not None:
            self._raised = exc_info[1]
        super().handle_exception(job, *exc_info)

    def handle_job_success(self, job: Job, queue: Queue, started_job_registry: StartedJobRegistry) -> None:
        run = self._current(job)
        if run is not None:
            run.finished()
            self.tracking.flush()
        super().handle_job_success(job, queue, started_job_registry)

    def handle_job_retry(
        self, job: Job, queue: Queue, retry: Retry, started_job_registry: StartedJobRegistry, execution: Any
    ) -> None:
        run = self._current(job)
        if run is not None:
            done = job.number_of_retries or 0
            if done >= retry.max:
                _end(run, f"returned Retry with all {retry.max} retries run", None)
            else:
                run.tracker.record(rules.waiting_for_retry(run.jid, done + 1, retry.max))
            self.tracking.flush()
        super().handle_job_retry(job, queue, retry, started_job_registry, execution)

    def handle_job_failure(
        self,
        job: Job,
        queue: Queue,
        started_job_registry: StartedJobRegistry | None = None,
        exc_string: str = "",
    ) -> None:
        run = self._current(job)
        if run is not None:
            self._record_raised(run, job, exc_string)
        elif (task := task_of(job)) is not None:
            self._record_outside(job, task, exc_string)
        super().handle_job_failure(job, queue, started_job_registry, exc_string)

    def _current(self, job: Job) -> JobRun | None:
        return self._run if self._run is not None and self._run.jid == job.id else None

    def _record_raised(self, run: JobRun, job: Job, exc_string: str) -> None:
        exc = self._raised
        if exc is None:
            # RQ reported a failure without passing its exception through handle_exception
            # (a subclass of RQ's worker may): its text is all there is.
            lines = exc_string.strip().splitlines()
            _end(run, lines[-1] if lines else "failed", next_retry(job))
        elif isinstance(exc, JobFailed):
            # Not retried, whatever the job's Retry says: RQ retries while retries_left > 0.
            job.retries_left = 0
            run.raised(exc, retry=None)
        elif isinstance(exc, JobTimeoutException):
            _end(run, f"timed out after {job.timeout or self.queue_class.DEFAULT_TIMEOUT} s", next_retry(job))
        else:
            run.raised(exc, retry=next_retry(job))
        self.tracking.flush()

    # --- in the worker process: what only it sees ------------------------------------------

    def handle_work_horse_killed(self, job: Job, retpid: int, ret_val: int, rusage: Any) -> None:
        self._horse_status = ret_val
        super().handle_work_horse_killed(job, retpid, ret_val, rusage)  # type: ignore[no-untyped-call]

    def _record_outside(self, job: Job, task: str, exc_string: str) -> None:
        """A tracked job that failed outside its own run: stopped, its horse died, or (RQ's
        maintenance) it sat in an intermediate queue after its worker died."""
        run = self._run_of(job, task)
        if self._stopped_job_id == job.id:
            run.ended(EventStatus.CANCELLED, "stopped by send_stop_job_command")
        else:
            status, self._horse_status = self._horse_status, None
            if status is None:
                reason = "its worker died before it started"
            elif os.WIFSIGNALED(status):
                reason = f"its work horse was killed by signal {os.WTERMSIG(status)}"
            else:
                reason = f"its work horse exited with status {os.waitstatus_to_exitcode(status)}"
            _end(run, f"worker lost: {reason}", next_retry(job))
        self.tracking.flush()

    def _record_abandoned(
        self, job: Job, exc_type: type[BaseException], exc_value: BaseException, tb: Any
    ) -> bool | None:
        """RQ's maintenance found ``job`` in a started-job registry past its deadline (its worker
        died): recorded before RQ retries or fails it. Returns None: the next handlers run."""
        task = task_of(job)
        if task is None or not isinstance(exc_value, AbandonedJobError):
            return None
        _end(self._run_of(job, task), "worker lost: RQ found the job abandoned", next_retry(job))
        self.tracking.flush()
        return None


def _end(run: JobRun, message: str, retry: tuple[int, int] | None) -> None:
    """``error`` with ``message`` and what RQ does next, recorded together: the tracking rules of
    a raised exception, for an end RQ saw without one (time limit, lost worker)."""
    if retry is None:
        decision = rules.gave_up(run.jid, "no retries left")
    else:
        decision = rules.waiting_for_retry(run.jid, *retry)
    run.tracker.record(transitions.status(run.jid, EventStatus.ERROR, message), decision)


class TrackedWorker(TrackingWorkerMixin, Worker):
    """RQ's default worker (a work horse forked per job) with AsyncTask tracking."""


class TrackedSimpleWorker(TrackingWorkerMixin, SimpleWorker):
    """RQ's SimpleWorker (jobs run in the worker process itself) with AsyncTask tracking."""


# --- submission ---------------------------------------------------------------------------


class RqSender:
    """Sends a task's chunk jobs to an RQ queue: one ``Queue.enqueue_many`` per batch, in one
    ``MULTI``/``EXEC`` pipeline, so Redis applies a batch whole or not at all."""

    def __init__(
        self,
        func: Callable[..., Any],
        queue: str,
        connection: redis.Redis | None,
        retry: Retry | None,
        timeout: int | None,
    ) -> None:
        self.func = func
        self.queue_name = queue
        self.retry = retry
        self.timeout = timeout
        self._connection = connection
        self._queues: dict[tuple[int, str], Queue] = {}

    def queue(self) -> Queue:
        """The RQ queue to send to: on the given connection, else on ``RQ_REDIS_URL`` as it is
        now (read at each send, one connection per URL and process: a forked child opens its own)."""
        url = "" if self._connection is not None else os.environ.get("RQ_REDIS_URL", DEFAULT_REDIS_URL)
        key = (os.getpid(), url)
        found = self._queues.get(key)
        if found is None:
            connection = self._connection if self._connection is not None else redis.Redis.from_url(url)
            found = self._queues[key] = Queue(self.queue_name, connection=connection)
        return found

    def send(self, jobs: Sequence[OutgoingJob]) -> None:
        queue = self.queue()
        extra = {} if self.retry is None else {RETRIES_META: self.retry.max}
        datas = [
            Queue.prepare_data(
                self.func,
                args=job.args,
                job_id=job.jid,
                meta=extra if job.task is None else {TASK_META: job.task, **extra},
                retry=self.retry,
                timeout=self.timeout,
            )
            for job in jobs
        ]
        with queue.connection.pipeline() as pipeline:
            queue.enqueue_many(datas, pipeline=pipeline)
            pipeline.execute()


#: The functions made submittable in this process, by identity, with their jobs.
_submittable: dict[int, tuple[Callable[..., Any], RuntimeJob]] = {}


def submittable(
    func: Callable[..., Any],
    *,
    queue: str = "default",
    connection: redis.Redis | None = None,
    name: str | None = None,
    api: bool = True,
    item_schema: Mapping[str, Any] | None = None,
    retry: Retry | None = None,
    timeout: int | None = None,
) -> RuntimeJob:
    """Register ``func`` (a plain function RQ can import) as a job whose tasks AsyncTask creates
    and RQ runs: ``asynctask.create_task(func, items)`` and ``POST /api/tasks?job=<name>`` then
    enqueue each chunk as an RQ job on ``queue`` (``retry`` and ``timeout``, RQ's
    ``job_timeout`` in seconds, applied to every one).

    ``name`` defaults to "module.qualname"; ``connection`` to ``RQ_REDIS_URL`` (else
    redis://localhost:6379/0, RQ's own default), opened when the first chunk is sent.
    """
    job = RuntimeJob(
        func,
        name or f"{func.__module__}.{func.__qualname__}",
        runtime=RUNTIME,
        queue=queue,
        sender=RqSender(func, queue, connection, retry, timeout),
        api=api,
        item_schema=item_schema,
    )
    register(job)
    _submittable[id(func)] = (func, job)
    return job


def _adapt(obj: object) -> RuntimeJob | None:
    found = _submittable.get(id(obj))
    return found[1] if found is not None and found[0] is obj else None


add_adapter(_adapt)

__all__ = [
    "RETRIES_META",
    "TASK_META",
    "RqSender",
    "TrackedSimpleWorker",
    "TrackedWorker",
    "TrackingWorkerMixin",
    "default_tracking",
    "submittable",
]
