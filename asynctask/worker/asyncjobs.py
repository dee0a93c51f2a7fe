"""Async jobs: an ``async def`` job is awaited on the worker process's event loop (a thread of
its own), up to ``async_concurrency`` at once, beside the processor threads that run sync jobs.

- A processor thread that fetched an async job hands it over once a slot is free and goes back
  to fetching. The job stays claimed by this process, counted as held by the fetcher
  (``Fetcher.detach``), until it is settled: nothing gives it back while it runs.
- Settling (an acknowledgement, a retry, a burial) talks to the broker, which the loop must
  never wait for: the settle thread does it, and acknowledges every job that ended meanwhile
  in one round trip.
- At a hard shutdown the jobs still awaited are cancelled (``asyncio.CancelledError`` at their
  next await) and stay claimed: the shutdown gives them back to their queues with the rest.
  A ``CancelledError`` the job raises by itself is a failure like any other.
- A job that blocks the loop (a sync call: ``time.sleep``, a blocking driver) stalls every
  async job of the process. The watch thread sees the loop late by more than
  ``BLOCKED_AFTER`` seconds and names the job whose code holds the loop, once per job name.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from asynctask import context, payload
from asynctask.brokers import UnitOfWork
from asynctask.context import Iteration, JobContext
from asynctask.errors import TASK_CANCELLED, JobInterrupted
from asynctask.job_spec import JobSpec
from asynctask.supervision import Activity
from asynctask.worker.processor import Crew, Processor, log_start
from asynctask.worker.resumable import begin
from asynctask.worker.stats import Work

logger = logging.getLogger("asynctask.asyncjobs")

#: Seconds the loop may be late before the job holding it is reported.
BLOCKED_AFTER = 0.1
#: Seconds between the loop's ticks, which the watch thread checks.
TICK = 0.02
#: Seconds between checks for running jobs whose task was cancelled.
CANCEL_CHECK = 0.5
#: Seconds a running job whose task was cancelled gets to end by itself (it may check
#: ``current_job().cancelled``) before it is cancelled.
CANCEL_GRACE = 2.0
#: Seconds the tasks left when the loop stops get to end.
LAST_UNWIND = 1.0
#: Seconds a processor thread waits for a free slot before it checks whether to stop.
SLOT_WAIT = 0.1


@dataclass(slots=True)
class _Running:
    #: The job's task id, if it has one (a string), to check whether it was cancelled.
    task: object
    #: When the watch thread first saw its task cancelled (monotonic).
    cancel_seen: float | None = None
    #: Whether the job was cancelled for it (once: a second cancel would break its unwinding).
    cancel_sent: bool = False


@dataclass(slots=True)
class _Ended:
    unit: UnitOfWork
    job: payload.JobDict
    definition: JobSpec[Any]
    #: A resumable job's run, or None.
    iteration: Iteration | None
    #: What the run raised, or None; a cancel by the runtime as the ``JobInterrupted`` it
    #: stands for, which the processor settles as a resumable job's.
    error: BaseException | None
    #: Cancelled by a hard shutdown: counted as failed, as an interrupted thread's job is.
    interrupted: bool
    start: float
    #: The job's entry in the process's busy list.
    key: str


class AsyncJobs:
    def __init__(self, crew: Crew) -> None:
        self.crew = crew
        self._slots = threading.BoundedSemaphore(crew.settings.async_concurrency)
        self._loop = asyncio.new_event_loop()
        #: The jobs being awaited (written on the loop only).
        self._running: dict[asyncio.Task[None], _Running] = {}
        #: Jobs handed over and not started yet; the loop is woken once for all those that
        #: come while it is busy (each wake-up is a write to its self-pipe).
        self._incoming: deque[tuple[UnitOfWork, payload.JobDict, JobSpec[Any], str]] = deque()
        self._woken = False
        #: Runs that ended during this turn of the loop: handed to the settle thread together.
        self._ending: list[_Ended] = []
        self._ended: queue.SimpleQueue[list[_Ended] | None] = queue.SimpleQueue()
        #: Jobs handed to the loop and not settled yet.
        self._in_flight = 0
        self._in_flight_lock = threading.Lock()
        # Its thread is never started: the settle thread calls its settling methods.
        self._settler = Processor(crew, -1)
        self._numbers = itertools.count(1)
        #: Each async job function's code, by job name: how a blocking job is found on the stack.
        self._codes: dict[CodeType, str] = {}
        self._reported: set[str] = set()
        self._last_tick = time.monotonic()
        #: The longest a tick came late since ``take_worst_lag`` last read it.
        self._worst_lag = 0.0
        self._worst_lag_lock = threading.Lock()
        self._stopped = threading.Event()
        errors = crew.tracker.store.errors if crew.tracker is not None else crew.broker.errors
        self._cancel_checking = Activity("cancelled tasks check", logger, errors)
        self._loop_thread = threading.Thread(target=self._run_loop, name="asynctask-event-loop", daemon=True)
        self._settle_thread = threading.Thread(
            target=self._settle_loop, name="asynctask-async-settle", daemon=True
        )
        self._watch_thread = threading.Thread(target=self._watch, name="asynctask-loop-watch", daemon=True)
        self._loop_thread.start()
        self._settle_thread.start()
        self._watch_thread.start()

    @property
    def busy(self) -> int:
        return self._in_flight

    def submit(self, unit: UnitOfWork, job: payload.JobDict, definition: JobSpec[Any]) -> None:
        """Hand ``unit`` to the loop (from the processor thread that fetched it), once a slot is free."""
        crew = self.crew
        while not self._slots.acquire(timeout=SLOT_WAIT):
            if crew.quieting.is_set():
                # Not started: it goes back to its queue, as unstarted claims do when quieting.
                crew.fetch.requeue([unit])
                return
        if crew.quieting.is_set():
            # The slot came free as the process went quiet (a recycle after the job that held it).
            self._slots.release()
            crew.fetch.requeue([unit])
            return
        code = getattr(definition.func, "__code__", None)
        if code is not None and code not in self._codes:
            self._codes[code] = definition.name
        key = f"async-{next(self._numbers)}"
        crew.fetch.detach(unit)
        with self._in_flight_lock:
            self._in_flight += 1
        crew.stats.started(key, Work(unit.queue, unit.payload, int(time.time())))
        self._incoming.append((unit, job, definition, key))
        if not self._woken:
            self._woken = True
            self._loop.call_soon_threadsafe(self._start_incoming)

    def _start_incoming(self) -> None:
        # Cleared before taking: a job handed over from now on wakes the loop again.
        self._woken = False
        incoming = self._incoming
        while incoming:
            unit, job, definition, key = incoming.popleft()
            task = self._loop.create_task(self._run(unit, job, definition, key))
            self._running[task] = _Running(job.get("task"))

    async def _run(self, unit: UnitOfWork, job: payload.JobDict, definition: JobSpec[Any], key: str) -> None:
        start = time.perf_counter()
        log_start(job, unit)
        args = job["args"]
        iteration = Iteration(None, 0) if definition.resumable else None
        job_context = JobContext(job, unit.queue, self.crew.tracker, iteration, self.crew.adder)
        context.enter(job_context)
        final: Callable[[], Awaitable[Any]] = lambda: definition.func(*args)  # noqa: E731
        if iteration is not None:
            final = lambda: self._iterate(job_context, iteration, definition)  # noqa: E731
        error: BaseException | None = None
        interrupted = False
        task = asyncio.current_task()
        try:
            await self.crew.server_chain.ainvoke(definition, job, unit.queue, final=final)
        except BaseException as exc:
            error = exc
            if isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling() > 0:
                # The runtime's cancel: the job's task was cancelled (acknowledged, its checkpoint
                # dropped) or the worker is stopping (left claimed for the shutdown's requeue).
                interrupted = exc.args != (TASK_CANCELLED,)
                cursor = iteration.cursor if iteration is not None else None
                error = JobInterrupted("shutdown" if interrupted else "cancel", cursor)
        finally:
            if task is not None:
                del self._running[task]
        self._ending.append(_Ended(unit, job, definition, iteration, error, interrupted, start, key))
        if len(self._ending) == 1:
            self._loop.call_soon(self._hand_ended)

    async def _iterate(self, job_context: JobContext, iteration: Iteration, definition: JobSpec[Any]) -> None:
        """Run a resumable async job from its checkpoint (the middleware's ``final``)."""
        job = job_context.job
        stored = await asyncio.to_thread(self.crew.broker.checkpoints.load, job_context.jid)
        cursor = begin(job, stored, iteration)
        await self._settler.runner(job_context, iteration).arun(definition.func(*job["args"], cursor=cursor))

    def _hand_ended(self) -> None:
        ending, self._ending = self._ending, []
        # The slots of a turn's ended runs, freed together: each release wakes a waiting thread.
        self._slots.release(len(ending))
        self._ended.put(ending)

    def _settle_loop(self) -> None:
        crew = self.crew
        while True:
            batches = [self._ended.get()]
            while True:
                try:
                    batches.append(self._ended.get_nowait())
                except queue.Empty:
                    break
            acknowledged = False
            for batch in batches:
                for ended in batch or ():
                    acknowledged |= self._settle(ended)
            if acknowledged:
                try:
                    crew.fetch.flush_acks()
                except crew.broker.errors as exc:
                    # The acknowledgements stay queued: the next claim of any thread carries them.
                    crew.fetching.failed(exc)
            if None in batches:
                return

    def _settle(self, ended: _Ended) -> bool:
        """Settle one run; True if it waits for acknowledgement."""
        crew = self.crew
        outcome = self._settler.settle_run(
            ended.unit, ended.job, ended.definition, ended.iteration, ended.error, ended.start
        )
        crew.fetch.reattached(ended.unit, ack=outcome == "ack")
        crew.stats.finished(ended.key, failed=ended.interrupted or outcome in (None, "failed"))
        with self._in_flight_lock:
            self._in_flight -= 1
        return outcome == "ack"

    def interrupt(self, timeout: float) -> None:
        """Cancel every job still awaited, and wait up to ``timeout`` seconds for them to unwind."""
        end = time.monotonic() + timeout
        cancelled = threading.Event()

        def cancel() -> None:
            for task in self._running:
                task.cancel("shutdown")
            cancelled.set()

        self._loop.call_soon_threadsafe(cancel)
        cancelled.wait(timeout)
        while self._running and time.monotonic() < end:
            time.sleep(0.01)
        if self._running:
            logger.warning("%d async job(s) did not unwind after being cancelled", len(self._running))

    def stop(self) -> None:
        """Stop the loop, then settle what ended (the jobs have ended or were interrupted)."""
        self._stopped.set()
        self._loop.call_soon_threadsafe(self._loop.stop)
        # A job stuck in a blocking call holds the loop for good: its claim goes back with the rest.
        self._loop_thread.join(LAST_UNWIND + 1)
        self._watch_thread.join()
        self._ended.put(None)
        self._settle_thread.join()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.create_task(self._tick())
        try:
            self._loop.run_forever()
        finally:
            # Left after the shutdown's interruption: the ticker, and jobs that would not unwind
            # (they are claimed still, and go back to their queues with the rest).
            left = asyncio.all_tasks(self._loop)
            for task in left:
                task.cancel()
            if left:
                self._loop.run_until_complete(asyncio.wait(left, timeout=LAST_UNWIND))
            if self._ending:
                self._hand_ended()
            # What its jobs left open on the loop (the default async client's connections)
            # closes here, as under asyncio.run.
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _tick(self) -> None:
        self._last_tick = time.monotonic()
        while True:
            await asyncio.sleep(TICK)
            now = time.monotonic()
            lag = self._late(now)
            self._last_tick = now
            if lag > self._worst_lag:
                with self._worst_lag_lock:
                    self._worst_lag = max(self._worst_lag, lag)

    def take_worst_lag(self) -> float:
        """Seconds: the longest the loop was late since the last call (what the heartbeat
        reports); a stall still going on counts up to now."""
        with self._worst_lag_lock:
            worst, self._worst_lag = self._worst_lag, 0.0
        return max(worst, self._late(time.monotonic()), 0.0)

    def _late(self, now: float) -> float:
        """Seconds the loop's next tick is late at ``now`` (negative before it is due)."""
        return now - self._last_tick - TICK

    def _watch(self) -> None:
        """Report the job blocking the loop (checked on a thread: the loop cannot tell while it
        is blocked), and cancel the jobs of cancelled tasks."""
        next_cancel_check = time.monotonic()
        while not self._stopped.wait(TICK):
            now = time.monotonic()
            lag = self._late(now)
            if lag > BLOCKED_AFTER:
                self._report_blocking(lag)
            if now >= next_cancel_check and self.crew.tracker is not None:
                next_cancel_check = now + CANCEL_CHECK
                self._cancel_checking.attempt(self._cancel_jobs_of_cancelled_tasks)

    def _cancel_jobs_of_cancelled_tasks(self) -> None:
        """Cancel the running jobs whose task was cancelled at least ``CANCEL_GRACE`` seconds
        ago (as this process learnt it: with its claims), with ``TASK_CANCELLED``."""
        tracker = self.crew.tracker
        assert tracker is not None
        now = time.monotonic()
        # One step of C under the GIL: a consistent copy while the loop adds and removes jobs.
        for task, running in list(self._running.items()):
            if not isinstance(running.task, str) or not tracker.was_cancelled(running.task):
                continue
            if running.cancel_seen is None:
                running.cancel_seen = now
            elif now - running.cancel_seen >= CANCEL_GRACE and not running.cancel_sent:
                running.cancel_sent = True
                self._loop.call_soon_threadsafe(task.cancel, TASK_CANCELLED)

    def _report_blocking(self, lag: float) -> None:
        frame = sys._current_frames().get(self._loop_thread.ident or -1)
        name = self._job_on_stack(frame)
        if name is None or name in self._reported:
            return
        self._reported.add(name)
        logger.warning(
            "async job %s blocked the event loop for %.2f s so far: every async job of this process "
            "waits meanwhile (run blocking calls with asyncio.to_thread)",
            name,
            lag,
            extra={"fields": {"class": name, "blocked": round(lag, 3)}},
        )

    def _job_on_stack(self, frame: FrameType | None) -> str | None:
        while frame is not None:
            name = self._codes.get(frame.f_code)
            if name is not None:
                return name
            frame = frame.f_back
        return None
