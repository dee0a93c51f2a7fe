"""Manager: owns the processor threads of one worker process.

- ``start``: spin up ``concurrency`` processors.
- a processor that dies of an unexpected error is logged and replaced, after a pause that
  grows while deaths follow each other; the job it held is given back at the heartbeat's
  claim check (``Fetcher.reconcile``).
- ``quiet``: processors finish their current job and stop fetching.
- ``stop(deadline)``: quiet, wait for busy processors until the deadline, then hard shutdown:
  each busy thread gets ``Shutdown`` raised in it and a moment to unwind, finished jobs are
  acknowledged, then every job this process still holds goes back to its queue. Requeueing
  last means a thread that claimed a job while being interrupted cannot leave it behind.
  Jobs run at least once: a job interrupted here runs again, it is never lost.

Async jobs are awaited on an event loop the manager starts with the first one fetched
(``asyncjobs``); stopping waits for them as for the threads, and cancels those still awaited
at the deadline.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from typing import Any

from asynctask.brokers import Broker, Fetcher
from asynctask.context import TaskAdder
from asynctask.errors import Shutdown
from asynctask.middleware import Chain
from asynctask.registry import Registry
from asynctask.settings import Settings
from asynctask.supervision import Activity, backoff
from asynctask.tracking.tracker import Tracker
from asynctask.worker.additions import WorkerAdder
from asynctask.worker.asyncjobs import AsyncJobs
from asynctask.worker.placement import Placement
from asynctask.worker.processor import Processor
from asynctask.worker.retry import Retrier
from asynctask.worker.stats import Stats

logger = logging.getLogger("asynctask.manager")

#: Seconds between checks while waiting for busy processors to finish.
PAUSE = 0.1
#: Seconds without a processor death after which the pause before a replacement starts over.
DEATHS_FORGOTTEN_AFTER = 60.0
#: Seconds interrupted jobs get to unwind after the shutdown timeout, before their jobs are
#: pushed back.
UNWIND_TIMEOUT = 3.0


class Manager:
    def __init__(
        self,
        settings: Settings,
        broker: Broker,
        fetch: Fetcher,
        registry: Registry,
        server_chain: Chain[Any],
        stats: Stats,
        tracker: Tracker | None = None,
    ) -> None:
        self.settings = settings
        #: Where the processor threads run (``placement``).
        self.placement = Placement(settings.cpu_pinning)
        self.broker = broker
        self.fetch = fetch
        self.registry = registry
        self.server_chain = server_chain
        self.stats = stats
        self.tracker = tracker
        #: Adds work to running jobs' tasks (``current_job().task.add``): only where they are tracked.
        self._adder = WorkerAdder(settings, registry) if tracker is not None else None
        self.adder: TaskAdder | None = self._adder
        self.retrier = Retrier(broker, settings, tracker)
        self.quieting = threading.Event()
        #: Set when the process is stopping (not merely quiet): resumable jobs hand their
        #: work back at their next iteration rather than run to the end.
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._processors: set[Processor] = set()
        #: Processor deaths in a row (none more than ``DEATHS_FORGOTTEN_AFTER`` apart).
        self._deaths = 0
        self._last_death = 0.0
        self._async_jobs: AsyncJobs | None = None
        #: The processors' fetches: an outage is logged once for all of them.
        self.fetching = Activity("fetch", logging.getLogger("asynctask.processor"), broker.errors)

    def start(self) -> None:
        for index in range(self.settings.concurrency):
            self._spawn(index)

    def async_jobs(self) -> AsyncJobs:
        """The event loop that runs async jobs, started by the first one."""
        with self._lock:
            if self._async_jobs is None:
                # Started by a job thread: its threads must not inherit that thread's CPU.
                with self.placement.freed():
                    self._async_jobs = AsyncJobs(self)
            return self._async_jobs

    def loop_lag(self) -> float:
        """Seconds: the longest the async jobs' event loop was late since the last call (0
        before the first async job)."""
        async_jobs = self._async_jobs
        return async_jobs.take_worst_lag() if async_jobs is not None else 0.0

    @property
    def busy(self) -> int:
        with self._lock:
            threads = sum(1 for p in self._processors if p.unit is not None)
            return threads + (self._async_jobs.busy if self._async_jobs is not None else 0)

    def quiet(self) -> None:
        if not self.quieting.is_set():
            logger.info("quieting: finishing current jobs, fetching no more")
            self.quieting.set()
            try:
                self.fetch.interrupt()
                self.fetch.requeue_buffered()
            except self.broker.errors as exc:
                # The threads still return at their fetch timeout; the buffered claims are
                # given back with the rest at shutdown, or recovered by a peer.
                logger.error("could not hand back unstarted jobs while going quiet: %s", exc)

    def stop(self, deadline: float) -> None:
        """Quiet, wait for processors until ``deadline`` (monotonic), interrupt the rest, requeue."""
        self.stopping.set()
        self.quiet()
        while time.monotonic() < deadline:
            with self._lock:
                async_jobs = self._async_jobs
                if not self._processors and (async_jobs is None or not async_jobs.busy):
                    break
            time.sleep(PAUSE)
        else:
            self._interrupt_busy()
        if self._async_jobs is not None:
            self._async_jobs.stop()
        if self._adder is not None:
            self._adder.close()
        try:
            self.fetch.flush_acks()
            if self.tracker is not None:
                # Interrupted jobs recorded "interrupted" while unwinding; that must be in the
                # stream before the jobs are back in a queue where another process can start them.
                self.tracker.send()
            moved = self.fetch.requeue_all(forget=True)
        except self.broker.errors as exc:
            logger.error(
                "could not push unfinished jobs back (%s): they return to their queues once this "
                "process's record expires (process_ttl)",
                exc,
            )
            return
        if moved:
            logger.warning("%d unfinished job(s) pushed back to their queues", moved)

    def processor_stopped(self, processor: Processor) -> None:
        with self._lock:
            self._processors.discard(processor)

    def processor_died(self, processor: Processor, exc: BaseException) -> None:
        with self._lock:
            self._processors.discard(processor)
            now = time.monotonic()
            if now - self._last_death > DEATHS_FORGOTTEN_AFTER:
                self._deaths = 0
            self._last_death = now
            self._deaths += 1
            delay = backoff(self._deaths)
        logger.error(
            "processor thread died; starting a new one",
            exc_info=(type(exc), exc, exc.__traceback__),
            extra={"fields": {"thread": processor.thread.name, "delay": delay}},
        )
        if not self.quieting.is_set():
            self._spawn(processor.index, delay)

    def _spawn(self, index: int, delay: float = 0.0) -> None:
        processor = Processor(self, index, delay)
        with self._lock:
            self._processors.add(processor)
        processor.start()

    def _interrupt_busy(self) -> None:
        with self._lock:
            remaining = list(self._processors)
            async_jobs = self._async_jobs
        awaited = async_jobs.busy if async_jobs is not None else 0
        logger.warning(
            "timeout reached: interrupting %d busy job(s)",
            sum(1 for p in remaining if p.unit is not None) + awaited,
        )
        if async_jobs is not None:
            # Cancelled first: the threads' unwinding below is then also the loop's.
            async_jobs.interrupt(UNWIND_TIMEOUT)
        for processor in remaining:
            ident = processor.thread.ident
            if ident is not None and processor.thread.is_alive():
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(Shutdown))
        end = time.monotonic() + UNWIND_TIMEOUT
        for processor in remaining:
            processor.thread.join(max(0.0, end - time.monotonic()))
            if processor.thread.is_alive():
                # Stuck in a call that no exception interrupts (a sleep, I/O): counted as
                # processed and failed now, as Sidekiq counts an interrupted job, before the
                # last heartbeat flushes the counts.
                self.stats.finished(processor.tid, failed=True)
