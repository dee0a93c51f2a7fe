"""Tracking for jobs another runtime runs in this process: the write path of AsyncTask's own
workers, without its runtime.

- With a Redis URL (``ASYNCTASK_REDIS_URL``): transitions go to AsyncTask's tracking stream, as
  an AsyncTask worker's do, and a flusher thread applies them to SQL. A SQL outage costs
  nothing but delay: they wait in Redis. ``flush`` writes them to the stream before the
  runtime acknowledges a job, so a process killed after an acknowledgement loses nothing.
- Without Redis: a writer thread applies them to the tracking database in batches, a few
  times a second. While SQL is down they wait in this process's memory (the bound: a process
  that dies meanwhile loses them); ``flush`` then does not wait for SQL, so no job pays a
  SQL round trip, and a process killed with kill -9 loses what it recorded in the last
  fraction of a second.

Runtimes fork: Celery's prefork pool, Dramatiq's worker processes, RQ's work horses. All state
is made per process, on its first use there; ``start`` makes the current process the one that
applies the stream to SQL, so that short-lived children (RQ's horses) never start a flusher.
A child forked from a process that writes to Redis takes over its parent's broker (redis-py
opens new connections in a child by itself) and its cancellation news: building them again,
scripts and all, would cost an RQ work horse more than its job. For a runtime that forks per
job, the parent builds the children's tracking once and refreshes the news before each fork
(``start(forks_per_job=True)``, ``before_fork``): a horse then only records and writes.
The flusher is AsyncTask's own: a child process by default (``ASYNCTASK_FLUSHER``), so that
applying to SQL takes none of the job threads' interpreter lock. The process that applies also
sends, on each check, the due task callbacks that are this runtime's jobs it knows
(``tasks.runtime_callbacks``).
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from asynctask import payload
from asynctask.brokers import Broker, open_broker
from asynctask.middleware.runs import JobRun
from asynctask.registry import default_registry
from asynctask.settings import Settings
from asynctask.supervision import Activity
from asynctask.tasks.runtime import RuntimeJob
from asynctask.tracking.outbox import Outbox
from asynctask.tracking.store import CANCEL_NEWS_AGE
from asynctask.tracking.tracker import Tracker

if TYPE_CHECKING:
    from asynctask.tasks.runtime_callbacks import RuntimeCallbacks

logger = logging.getLogger("asynctask.integrations")


@dataclass
class _Claims:
    """The tracker's view of a fetcher: another runtime claims the jobs, so no claim brings a
    cancellation generation (runs ask the store instead, see ``JobRun.start``)."""

    outbox: Outbox
    cancel_generation: bytes = field(default=b"")


class _ProcessTracking:
    """One process's tracker, and its applier if this process applies the stream."""

    def __init__(
        self,
        settings: Settings,
        apply_here: bool,
        parent: _ProcessTracking | None = None,
        connection: object = None,
        sender_on_demand: bool = False,
    ) -> None:
        self.pid = os.getpid()
        self._settings = settings
        #: Sends due callbacks of this runtime's jobs, made at the first look that has one.
        self._callbacks: RuntimeCallbacks | None = None
        #: Whether this process opened its broker (else it took over its parent's, see ``_here``).
        self._owns_broker = parent is None
        self.broker: Broker = open_broker(settings) if parent is None else parent.broker
        outbox = Outbox()
        outbox.text_limit = settings.tracked_text_limit
        identity = f"{socket.gethostname()}:{self.pid}:{secrets.token_hex(6)}"
        self.applier = self.broker.tracking.applier(identity) if apply_here else None
        store = self.broker.tracking if connection is None else self.broker.tracking.through(connection)
        self.tracker = Tracker(store, _Claims(outbox), self.applier.wake if self.applier else None)
        #: Whether ``flush`` writes now: to Redis (one round trip), never to SQL.
        self.flushes = settings.uses_redis
        self._cancel_lock = threading.Lock()
        self._generation: bytes | None = None
        self._cancelled: frozenset[str] = frozenset()
        #: When the cancellation news in hand was asked for (monotonic seconds).
        self._asked_at = -CANCEL_NEWS_AGE
        if parent is not None:
            self.take_news(parent)
        self._stopped = threading.Event()
        if self.applier is not None:
            self.applier.start()
            self._checker = threading.Thread(
                target=self._check_loop,
                args=(settings.heartbeat_interval,),
                name="asynctask-tracking-check",
                daemon=True,
            )
            self._checker.start()
        self.tracker.start(on_demand=sender_on_demand)

    def take_news(self, parent: _ProcessTracking) -> None:
        """Start from the cancellation news of the process this one was forked from."""
        # The monotonic clock is the machine's: the parent's news ages here as it did there.
        self._generation, self._cancelled, self._asked_at = (
            parent._generation,
            parent._cancelled,
            parent._asked_at,
        )

    def cancelled(self, task: str) -> bool:
        """Whether ``task`` was cancelled, on news at most ``CANCEL_NEWS_AGE`` old: one read of
        the cancellation generation per that time in the process, not one per job (and the
        cancelled set again only when it changed). ``cancel_task`` of such a task waits as long
        before it returns."""
        self.refresh_cancellations()
        return task in self._cancelled

    def refresh_cancellations(self) -> None:
        """Ask the store for the cancellation news when what is in hand is ``CANCEL_NEWS_AGE`` old."""
        with self._cancel_lock:
            if time.monotonic() - self._asked_at >= CANCEL_NEWS_AGE:
                # The time the question was asked, not answered: news older than a cancel
                # that landed meanwhile must not count as newer.
                asked = time.monotonic()
                store = self.tracker.store
                generation = store.cancel_generation()
                if generation != self._generation:
                    self._cancelled = store.cancelled_tasks()
                    self._generation = generation
                self._asked_at = asked

    def flush(self) -> None:
        """Write the outbox, waiting for a write another thread has in progress: this thread's
        transitions may be in it, and the runtime acknowledges the job once this returns."""
        outbox = self.tracker.outbox
        mark = outbox.mark()
        # Entries of other threads queued after this one's are theirs to write: under load, a
        # thread whose entries went out with another's write returns without a write of its own.
        while not outbox.written_through(mark):
            with outbox.draining(acknowledging=True, through=mark) as entries:
                if entries:
                    self.tracker.store.write_transitions(entries)

    def _check_loop(self, interval: float) -> None:
        applier = self.applier
        assert applier is not None
        activity = Activity("tracking applier check", logger, self.broker.errors)
        sending = Activity("sending task callbacks", logger)
        while not self._stopped.wait(interval):
            activity.attempt(applier.check)
            sending.attempt(self._send_callbacks)

    def _send_callbacks(self) -> None:
        """Send the due task callbacks that are jobs of this runtime the process knows (in the
        default registry: ``submittable``). Nothing is loaded while it knows none."""
        if self._callbacks is None:
            if not any(isinstance(job, RuntimeJob) for job in default_registry):
                return
            from asynctask.tasks.runtime_callbacks import RuntimeCallbacks

            self._callbacks = RuntimeCallbacks(self._settings, default_registry)
        self._callbacks.send_due()

    def close(self) -> None:
        self._stopped.set()
        self.tracker.stop()
        if self.applier is not None:
            self.applier.stop()
        if self._callbacks is not None:
            self._callbacks.close()
        if self._owns_broker:
            self.broker.close()


class AttachedTracking:
    """Tracking for jobs another runtime runs in this process and in the processes it forks."""

    def __init__(self, settings: Settings | None = None) -> None:
        self._given = settings
        self._settings: Settings | None = None
        self._lock = threading.Lock()
        self._process: _ProcessTracking | None = None
        #: Tracking of the processes this one was forked from (see ``_forked``).
        self._inherited: list[_ProcessTracking] = []
        #: The process that applies the stream to SQL (``start``); None: every process that records.
        self._applier_pid: int | None = None
        #: The tracking the next child forked from this process takes as its own (``start``).
        self._for_children: _ProcessTracking | None = None
        os.register_at_fork(after_in_child=self._forked)
        atexit.register(self.close)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            settings = (self._given or Settings.from_env()).validated()
            if not settings.tracking:
                raise ValueError("tracking is off (ASYNCTASK_TRACKING): nothing to attach")
            self._settings = settings
        return self._settings

    def _forked(self) -> None:
        # The parent's threads do not exist here and its lock may have been held at the fork.
        self._lock = threading.Lock()
        parent, prepared = self._process, self._for_children
        self._process = self._for_children = None
        if parent is not None:
            # Kept, never closed here: collected, its database connections would close the
            # sockets this process shares with the parent, ending the parent's sessions.
            self._inherited.append(parent)
            if prepared is not None:
                prepared.pid = os.getpid()
                prepared.take_news(parent)
                self._process = prepared

    def start(self, *, forks_per_job: bool = False, connection: object = None) -> None:
        """Set up this process's tracking now, with the applier: processes forked later record
        but leave applying to this one.

        ``forks_per_job``: the runtime forks a process for each job (RQ's work horses) and its
        hooks there call ``flush`` when the job starts and ends. The children's tracking is then
        built here, once, and each child takes its copy: built in every child, it would cost
        more than a no-op job (code run for the first time, memory copied on write). Their
        sender thread starts only if job code records something while it runs.
        ``connection``: a client of the runtime's own, which those children record through
        (an RQ work horse then opens one Redis connection, not two).
        """
        self._applier_pid = os.getpid()
        process = self._here()
        if forks_per_job and process.flushes:
            self._for_children = _ProcessTracking(
                self.settings, False, process, connection, sender_on_demand=True
            )

    def before_fork(self) -> None:
        """Bring this process's cancellation news up to date before the runtime forks a process
        for one job: the child inherits it instead of asking the store (see ``cancelled``)."""
        process = self._here()
        try:
            process.refresh_cancellations()
        except process.tracker.store.errors as exc:
            # The child asks again, and warns if the store still does not answer.
            logger.debug("cancellation news not refreshed before a fork: %s", exc)

    def _here(self) -> _ProcessTracking:
        process = self._process
        if process is not None:
            return process
        with self._lock:
            if self._process is None:
                pid = os.getpid()
                parent = self._inherited[-1] if self._inherited else None
                # Only a Redis client is safe to share with a fork; a SQL engine's pooled
                # connections are not, so a SQL-writing child opens its own.
                reused = parent if parent is not None and parent.flushes else None
                self._process = _ProcessTracking(self.settings, self._applier_pid in (None, pid), reused)
            return self._process

    def run(
        self,
        jid: str,
        task: str | None,
        name: str,
        args: list[Any] | None,
        queue: str = "",
    ) -> JobRun:
        """The run of job ``jid`` about to start (see ``JobRun``)."""
        job: payload.JobDict = {"jid": jid, "class": name, "args": args if args is not None else []}
        if task is not None:
            job["task"] = task
        process = self._here()
        return JobRun(process.tracker, job, queue, process.cancelled)

    def flush(self) -> None:
        """Write what this process recorded, before the runtime acknowledges a job (Redis only:
        SQL is written by the writer thread, and no job waits for it)."""
        process = self._process
        if process is None or not process.flushes:
            return
        try:
            process.flush()
        except process.tracker.store.errors as exc:
            # The job is done whatever tracking says: its transitions wait for the writer thread.
            logger.warning("tracking transitions stay in memory until the store answers again: %s", exc)

    def close(self) -> None:
        """Write what is left and stop this process's threads."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None and process.pid == os.getpid():
            process.close()
