"""Processor: one thread that fetches a job, runs it through the server middleware, and settles it.

Loop: fetch (which also acknowledges the previous success) -> decode -> look up the job in
the registry -> check its args -> server middleware -> function. Outcomes:

- success: acknowledged by the next claim any thread makes (or at exit);
- ``JobFailed`` (a business failure): done like a success; never retried;
- exception: ``Retrier.failed`` moves it to ``retry`` or ``dead`` atomically with its release;
- bytes that are not a job, an unknown class, args the function cannot take, an oversized
  payload: buried in the dead set with a clear ``error_message`` (retrying cannot help);
- ``Shutdown`` (hard shutdown): nothing; the manager already pushed the job back;
- a resumable job (a generator, see ``resumable``) that finishes is acknowledged at once,
  then its checkpoint is dropped; one interrupted between iterations is parked in the
  stopped set (a stop), acknowledged (its task was cancelled), handed back to its feed (its
  task was paused), or left to the shutdown's requeue (the worker is stopping), its
  checkpoint stored.

An unexpected error outside a job (the broker down, say) is logged (once per outage for all
the threads, see ``supervision``), and the thread carries on after a pause; a job it held
and can no longer settle is given back by the heartbeat's claim check.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol

from asynctask import context, payload
from asynctask.brokers import UnitOfWork
from asynctask.context import Iteration, JobContext, TaskAdder
from asynctask.errors import (
    JobArgumentsError,
    JobFailed,
    JobInterrupted,
    JobNotRegistered,
    PayloadError,
    Shutdown,
)
from asynctask.feeds import FEED_FIELD
from asynctask.job_spec import JobSpec
from asynctask.worker.resumable import Runner, begin
from asynctask.worker.retry import describe
from asynctask.worker.stats import Work, thread_tid

if TYPE_CHECKING:
    from asynctask.brokers import Broker, Fetcher
    from asynctask.middleware import Chain
    from asynctask.registry import Registry
    from asynctask.settings import Settings
    from asynctask.supervision import Activity
    from asynctask.tracking.tracker import Tracker
    from asynctask.worker.placement import Placement
    from asynctask.worker.retry import Retrier
    from asynctask.worker.stats import Stats

logger = logging.getLogger("asynctask.processor")

#: Seconds to wait before fetching again after the broker failed.
ERROR_PAUSE = 1.0

#: How a run ended for its unit: acknowledge it, it failed (settled by the retrier), or it
#: was settled already (parked, acknowledged at once, or left for the shutdown's requeue).
Outcome = Literal["ack", "failed", "settled"]


class AsyncRunner(Protocol):
    """Where a processor hands an async job: the event loop of the process's async jobs."""

    def submit(self, unit: UnitOfWork, job: payload.JobDict, definition: JobSpec[Any]) -> None: ...


class Crew(Protocol):
    """What the job runners of a worker process (its processors and async jobs) share, and
    how a processor reports its end: the process's ``Manager``."""

    settings: Settings
    placement: Placement
    broker: Broker
    fetch: Fetcher
    registry: Registry
    server_chain: Chain[Any]
    stats: Stats
    tracker: Tracker | None
    #: Adds work to running jobs' tasks; None where jobs are not tracked.
    adder: TaskAdder | None
    retrier: Retrier
    #: Set when the process goes quiet: take no more jobs.
    quieting: threading.Event
    #: Set when the process stops (not merely goes quiet).
    stopping: threading.Event
    #: The fetches of the process's runners: an outage is logged once for all of them.
    fetching: Activity

    def async_jobs(self) -> AsyncRunner: ...

    def processor_died(self, processor: Processor, exc: BaseException) -> None: ...

    def processor_stopped(self, processor: Processor) -> None: ...


class Processor:
    def __init__(self, crew: Crew, index: int, delay: float = 0.0) -> None:
        self.crew = crew
        self.index = index
        #: Seconds to wait before the first fetch (a replacement for a thread that died).
        self.delay = delay
        self.thread = threading.Thread(target=self.run, name=f"asynctask-processor-{index}", daemon=True)
        #: The unit being run now, or None; read by the manager at hard shutdown.
        self.unit: UnitOfWork | None = None
        #: The decoded job being handled, for the last-resort burial.
        self.job: payload.JobDict | None = None
        self.tid = ""

    def start(self) -> None:
        self.thread.start()

    def run(self) -> None:
        crew = self.crew
        self.tid = thread_tid()
        pending_ack: UnitOfWork | None = None
        cycle = self.index
        placement = crew.placement
        native_id = threading.get_native_id()
        try:
            placement.enroll(native_id)
            crew.quieting.wait(self.delay)
            while not crew.quieting.is_set():
                # fetch() owns the ack from here: on failure it keeps it for the next call.
                ack, pending_ack = pending_ack, None
                try:
                    unit = crew.fetch.fetch(ack, block_on=cycle)
                except crew.broker.errors as exc:
                    crew.fetching.failed(exc)
                    time.sleep(ERROR_PAUSE)
                    continue
                crew.fetching.succeeded()
                if unit is None:
                    cycle += 1
                    continue
                if crew.quieting.is_set():
                    crew.fetch.requeue([unit])
                    break
                placement.for_jobs(crew.fetch.jobs_come_in_batches())
                pending_ack = self.process(unit)
            if pending_ack is not None:
                crew.fetch.acknowledge(pending_ack)
        except Shutdown:
            pass
        except BaseException as exc:
            crew.processor_died(self, exc)
            return
        finally:
            placement.leave(native_id)
        crew.processor_stopped(self)

    def process(self, unit: UnitOfWork) -> UnitOfWork | None:
        """Run one job; return the unit if it still needs acknowledging (it succeeded).

        No payload can end the thread. Whatever a job's handling raises (decoding, lookup,
        middleware, retry bookkeeping, burial) buries its bytes as they were fetched; only a
        failure of the store leaves the job claimed, logged, and the heartbeat's claim check
        gives it back to its queue once no thread holds it.
        """
        try:
            return self._process(unit)
        except Shutdown:
            raise
        except self.crew.broker.errors as exc:
            self._store_failed(unit, exc)
        except Exception as exc:
            self._bury_raw(unit, exc, self.job)
        finally:
            self.job = None
        return None

    def _process(self, unit: UnitOfWork) -> UnitOfWork | None:
        crew = self.crew
        try:
            job = self._decode(unit)
        except PayloadError as exc:
            self._bury_undecodable(unit, exc)
            return None
        self.job = job
        # Read before the middleware could change the dict: the broker trusts it to match the bytes.
        unit = unit.decoded(job)
        try:
            definition = crew.registry.get(job["class"])
            definition.check_args(job["args"])
        except (JobNotRegistered, JobArgumentsError) as exc:
            # Retrying cannot help a job this process cannot run: bury it at once.
            crew.stats.count(failed=True)
            self._log_failure("job buried", job, unit, exc, 0.0, level=logging.ERROR)
            crew.retrier.bury(unit, job, exc)
            return None
        if definition.is_async:
            crew.async_jobs().submit(unit, job, definition)
            return None
        tid = self.tid
        crew.stats.started(tid, Work(unit.queue, unit.payload, int(time.time())))
        self.unit = unit
        failed = True
        try:
            outcome = self._run(unit, job, definition)
            failed = outcome == "failed"
            return unit if outcome == "ack" else None
        finally:
            self.unit = None
            crew.stats.finished(tid, failed=failed)

    def _run(self, unit: UnitOfWork, job: payload.JobDict, definition: JobSpec[Any]) -> Outcome:
        """Run the job through the server middleware."""
        args = job["args"]
        start = time.perf_counter()
        verbose = logger.isEnabledFor(logging.INFO)
        if verbose:
            log_start(job, unit)
        iteration = Iteration(None, 0) if definition.resumable else None
        job_context = JobContext(job, unit.queue, self.crew.tracker, iteration, self.crew.adder)
        context.enter(job_context)
        final: Callable[[], Any] = lambda: definition.func(*args)  # noqa: E731
        if iteration is not None:
            final = lambda: self._iterate(job_context, iteration, definition)  # noqa: E731
        try:
            self.crew.server_chain.invoke(definition, job, unit.queue, final=final)
        except Shutdown:
            raise
        except (Exception, SystemExit, JobInterrupted) as exc:
            return self.ended_by(unit, job, definition, iteration, exc, start)
        finally:
            context.enter(None)
            self._release_held(job)
        if verbose:
            _log_done(job, unit, start)
        return self._done(unit, job, iteration)

    def ended_by(
        self,
        unit: UnitOfWork,
        job: payload.JobDict,
        definition: JobSpec[Any],
        iteration: Iteration | None,
        exc: BaseException,
        start: float,
    ) -> Outcome:
        """Settle a run that raised ``exc`` (not a shutdown)."""
        if isinstance(exc, JobInterrupted):
            return self._interrupted(unit, job, exc)
        if isinstance(exc, JobFailed):
            # A business outcome, not a fault: done, not retried, not counted as failed.
            if logger.isEnabledFor(logging.INFO):
                logger.info(
                    "job failed: %s",
                    exc,
                    extra={"fields": {**_fields(job, unit), "elapsed": _elapsed(start)}},
                )
            return self._done(unit, job, iteration)
        self._log_failure("fail", job, unit, exc, time.perf_counter() - start, level=logging.WARNING)
        self.crew.retrier.failed(unit, job, definition, exc)
        return "failed"

    def settle_run(
        self,
        unit: UnitOfWork,
        job: payload.JobDict,
        definition: JobSpec[Any],
        iteration: Iteration | None,
        error: BaseException | None,
        start: float,
    ) -> Outcome | None:
        """Settle an async job's run (``error``: what it raised), on the settle thread: what
        ``process`` does once a sync job has run, with the same rule that no payload ends the
        thread. None if the job could not be settled (buried instead, or left to the claim check)."""
        self.job = job
        try:
            if error is None:
                if logger.isEnabledFor(logging.INFO):
                    _log_done(job, unit, start)
                return self._done(unit, job, iteration)
            return self.ended_by(unit, job, definition, iteration, error, start)
        except self.crew.broker.errors as exc:
            self._store_failed(unit, exc)
        except Exception as exc:
            self._bury_raw(unit, exc, job)
        finally:
            self.job = None
            self._release_held(job)
        return None

    def _release_held(self, job: payload.JobDict) -> None:
        """Whatever the failure's handling did, an ``error`` held for the run goes out now."""
        jid = job.get("jid")
        if self.crew.tracker is not None and isinstance(jid, str):
            self.crew.tracker.settled(jid)

    def _iterate(self, job_context: JobContext, iteration: Iteration, definition: JobSpec[Any]) -> None:
        """Run a resumable job from its checkpoint (the middleware's ``final``)."""
        job = job_context.job
        cursor = begin(job, self.crew.broker.checkpoints.load(job_context.jid), iteration)
        self.runner(job_context, iteration).run(definition.func(*job["args"], cursor=cursor))

    def runner(self, job_context: JobContext, iteration: Iteration) -> Runner:
        """The runner of a resumable job's run, from ``iteration``."""
        crew = self.crew
        return Runner(
            job_context.jid,
            crew.broker.checkpoints,
            iteration,
            interval=crew.settings.checkpoint_interval,
            stopping=crew.stopping,
            cancelled=lambda: job_context.cancelled,
            paused=lambda: self._feed_paused(job_context.job),
            progress=job_context.progress,
        )

    def _feed_paused(self, job: payload.JobDict) -> bool:
        feed = job.get(FEED_FIELD)
        if not isinstance(feed, str):
            return False
        state = self.crew.broker.feeds.state(feed)
        return state is not None and state.feed.paused

    def _done(self, unit: UnitOfWork, job: payload.JobDict, iteration: Iteration | None) -> Outcome:
        """A run ended well: a plain job is acknowledged with the next claim; a resumable one
        now, then its checkpoint goes (the other way round, a crash in between would run it
        again from the start)."""
        if iteration is None:
            return "ack"
        self.crew.fetch.acknowledge(unit)
        self.crew.broker.checkpoints.clear(job["jid"])
        return "settled"

    def _interrupted(self, unit: UnitOfWork, job: payload.JobDict, exc: JobInterrupted) -> Outcome:
        crew = self.crew
        # The transitions the job recorded go with its move, as a retry's do.
        outbox = crew.tracker.outbox if crew.tracker is not None else None
        if exc.reason == "stop":
            parked = dict(job)
            if exc.cursor is not None:
                parked["cursor"] = json.loads(exc.cursor)
            crew.broker.park(unit, payload.dumps_storable(parked), outbox)
            return "settled"
        if exc.reason == "cancel":
            crew.broker.checkpoints.clear(job["jid"])
            return "ack"
        if exc.reason == "pause":
            # Due at once, a fed job leaving the retry set rejoins the head of its feed's held
            # jobs: released again, first, when the task resumes. Its retry count is untouched.
            crew.broker.retry_at(unit, job, payload.now(), outbox)
            return "settled"
        # The worker is stopping: the shutdown gives the job back with its other claims.
        return "settled"

    def _decode(self, unit: UnitOfWork) -> payload.JobDict:
        limit = self.crew.settings.max_payload_bytes
        if len(unit.payload) > limit:
            raise PayloadError(
                f"payload of {len(unit.payload)} bytes is over the {limit}-byte limit (max_payload_bytes)"
            )
        return payload.loads(unit.payload)

    def _bury_undecodable(self, unit: UnitOfWork, exc: PayloadError) -> None:
        """Bury a payload that is not a job (or not a valid one) byte for byte: re-encoded, it
        would no longer show what was pushed."""
        crew = self.crew
        job = exc.job
        jid = payload.valid_jid(job.get("jid")) if job is not None else None
        crew.broker.kill_unparseable(unit, unit.payload, unit.queue, str(exc), jid)
        if job is not None and jid is not None and crew.tracker is not None:
            crew.tracker.buried(job, exc)
        crew.stats.count(failed=True)
        logger.error(
            "job buried: %s", exc, extra={"fields": {"queue": unit.queue, "bytes": len(unit.payload)}}
        )

    def _bury_raw(self, unit: UnitOfWork, exc: Exception, job: payload.JobDict | None) -> None:
        """The last resort: something unexpected went wrong with this job (``job`` if it was
        decoded). Bury its bytes as fetched, which needs nothing from them; if even that
        fails, log it and carry on."""
        crew = self.crew
        reason = f"AsyncTask could not handle this payload ({describe(exc)})"
        if exc.__context__ is not None:
            # Raised while handling an earlier error (the job's own failure, say): name it too.
            reason += f" while handling {describe(exc.__context__)}"
        jid = payload.valid_jid(job.get("jid")) if job is not None else None
        fields = {"queue": unit.queue, "jid": jid, "bytes": len(unit.payload)}
        logger.error("job buried: %s", reason, exc_info=exc, extra={"fields": fields})
        try:
            crew.broker.kill_unparseable(unit, unit.payload, unit.queue, reason, jid)
            if job is not None and jid is not None and crew.tracker is not None:
                # After whatever its failed handling recorded (a retry that did not happen).
                crew.tracker.buried(job, PayloadError(reason))
        except crew.broker.errors as failure:
            self._store_failed(unit, failure)
        except Exception:
            logger.exception(
                "could not bury a job; the claim check gives it back to its queue", extra={"fields": fields}
            )

    def _store_failed(self, unit: UnitOfWork, exc: BaseException) -> None:
        logger.error(
            "could not settle a job: %s; the claim check gives it back to its queue",
            exc,
            extra={"fields": {"queue": unit.queue, "error": type(exc).__name__}},
        )

    def _log_failure(
        self, msg: str, job: payload.JobDict, unit: UnitOfWork, exc: BaseException, elapsed: float, level: int
    ) -> None:
        if logger.isEnabledFor(level):
            fields = {**_fields(job, unit), "elapsed": round(elapsed, 6), "error": describe(exc)}
            logger.log(level, msg, extra={"fields": fields})


def log_start(job: payload.JobDict, unit: UnitOfWork) -> None:
    """The ``-v`` line of a job's start."""
    if logger.isEnabledFor(logging.INFO):
        logger.info("start", extra={"fields": _fields(job, unit)})


def _log_done(job: payload.JobDict, unit: UnitOfWork, start: float) -> None:
    logger.info("done", extra={"fields": {**_fields(job, unit), "elapsed": _elapsed(start)}})


def _fields(job: payload.JobDict, unit: UnitOfWork) -> dict[str, Any]:
    return {"class": job.get("class"), "jid": job.get("jid"), "queue": unit.queue}


def _elapsed(start: float) -> float:
    return round(time.perf_counter() - start, 6)
