"""What happens to a job that raised: Sidekiq's retry bookkeeping, backoff and dead set.

On each failure the payload gains ``error_message``, ``error_class``, ``failed_at`` (first
failure) or ``retried_at`` (later ones) and ``retry_count`` (0 on the first failure), and
optionally ``error_backtrace``. While ``retry_count`` is below the job's ``retry`` (an int,
or 25 for ``true``) the job goes to the ``retry`` set, due after ``count**4 + 15 +
rand(10) * (count + 1)`` seconds. After that the retries-exhausted hook runs and the job goes
to the dead set, unless ``dead: false``. ``retry: false`` drops it after the hook.
"""

from __future__ import annotations

import logging
import os
import random
import traceback
from typing import Any, Literal

from asynctask import payload
from asynctask.brokers import Broker, UnitOfWork
from asynctask.errors import error_class_name
from asynctask.job_spec import JobSpec
from asynctask.settings import Settings
from asynctask.tracking.tracker import Tracker

logger = logging.getLogger("asynctask.retry")

#: Sidekiq truncates error messages to this many characters.
MAX_ERROR_MESSAGE = 10_000


def default_delay(count: int) -> float:
    """Sidekiq's backoff for the ``count``-th retry (0-based), with its jitter."""
    return count**4 + 15 + random.randrange(10) * (count + 1)


def describe(exc: BaseException) -> str:
    """``Class: message`` of an exception, even one whose ``__str__`` raises."""
    return f"{type(exc).__name__}: {message(exc)}"


def message(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in if that raises: a job's exception must not stop its retry."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def record_error(job: payload.JobDict, exc: BaseException) -> int:
    """Write Sidekiq's failure fields into ``job``; return the new ``retry_count``."""
    job["error_message"] = message(exc)[:MAX_ERROR_MESSAGE]
    job["error_class"] = error_class_name(exc)
    count = job.get("retry_count")
    # Decoding refuses any other count (-1 is a job retried by hand after its first failure);
    # one set since (by middleware, say) counts as a first failure: it buys no extra retries.
    if type(count) is int and count >= -1:
        job["retried_at"] = payload.now()
        job["retry_count"] = count = count + 1
    else:
        job["failed_at"] = payload.now()
        job["retry_count"] = count = 0
    limit = job.get("backtrace")
    if limit and exc.__traceback__ is not None:
        lines = _ruby_style_backtrace(exc)
        if not isinstance(limit, bool) and isinstance(limit, int):
            lines = lines[:limit]
        job["error_backtrace"] = payload.compress_backtrace(lines)
    return count


#: Where the runtime's own modules live; its example jobs (``demo``) are job code.
_RUNTIME_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_DEMO_DIR = os.path.join(_RUNTIME_DIR, "demo") + os.sep


def _ruby_style_backtrace(exc: BaseException) -> list[str]:
    """Innermost frame first, as Ruby writes backtraces, without the runtime's own frames
    that called the job (processor, middleware chain): they are the same for every job and
    would crowd out the job's frames under a ``backtrace: N`` limit. Frames of the runtime
    that the job itself called are kept."""
    frames = traceback.extract_tb(exc.__traceback__)
    first_of_job = next((i for i, f in enumerate(frames) if not _is_runtime(f.filename)), 0)
    return [f"{f.filename}:{f.lineno}:in `{f.name}'" for f in reversed(frames[first_of_job:])]


def _is_runtime(filename: str) -> bool:
    return filename.startswith(_RUNTIME_DIR) and not filename.startswith(_DEMO_DIR)


class Retrier:
    def __init__(self, broker: Broker, settings: Settings, tracker: Tracker | None = None) -> None:
        self.broker = broker
        self.settings = settings
        self.tracker = tracker

    def failed(
        self, unit: UnitOfWork, job: payload.JobDict, definition: JobSpec[Any], exc: BaseException
    ) -> None:
        """Schedule a retry, or run the exhausted hook and bury or drop the job."""
        job.setdefault("queue", unit.queue)
        retry = job.get("retry", True)
        if retry is False or retry is None:
            self._exhausted(definition, job, exc)
            self._gave_up(job, "not retried (retry: false)")
            self.broker.release(unit)
            return
        if job.get("retry_queue"):
            job["queue"] = job["retry_queue"]
        count = record_error(job, exc)
        limit = self.settings.max_retries if retry is True else int(retry)
        if count < limit:
            delay = self._delay(definition, count, exc, job)
            if delay == "discard":
                self._gave_up(job, "discarded by retry_in")
                self.broker.release(unit)
                return
            if not isinstance(delay, str):
                if self.tracker is not None:
                    self.tracker.retry_scheduled(job, count, limit)
                outbox = self.tracker.outbox if self.tracker is not None else None
                self.broker.retry_at(unit, job, self.broker.clock.now() + delay, outbox)
                return
        self._exhausted(definition, job, exc)
        if job.get("dead") is False:
            self._gave_up(job, "no retries left; dropped (dead: false)")
            self.broker.release(unit)
        else:
            self._gave_up(job, "no retries left; moved to the dead set")
            self.broker.kill(unit, payload.dumps_storable(job))

    def bury(self, unit: UnitOfWork, job: payload.JobDict, exc: BaseException) -> None:
        """Send a job that can never run (unknown class, bad args) straight to the dead set."""
        job.setdefault("queue", unit.queue)
        record_error(job, exc)
        if self.tracker is not None:
            self.tracker.buried(job, exc)
        self.broker.kill(unit, payload.dumps_storable(job))

    def _gave_up(self, job: payload.JobDict, outcome: str) -> None:
        if self.tracker is not None:
            self.tracker.gave_up(job, outcome)

    def _delay(
        self, definition: JobSpec[Any], count: int, exc: BaseException, job: payload.JobDict
    ) -> float | Literal["kill", "discard"]:
        handler = definition.retry_in_handler
        if handler is not None:
            try:
                custom = handler(count, exc, job)
            except Exception:
                logger.exception("retry_in of %s failed; using the default delay", definition.name)
            else:
                if custom == "kill" or custom == "discard":
                    return custom
                if isinstance(custom, int | float) and custom > 0:
                    return float(custom) + random.randrange(10) * (count + 1)
        return default_delay(count)

    def _exhausted(self, definition: JobSpec[Any], job: payload.JobDict, exc: BaseException) -> None:
        handler = definition.retries_exhausted_handler
        if handler is None:
            return
        try:
            handler(job, exc)
        except Exception:
            logger.exception(
                "retries-exhausted hook of %s failed",
                definition.name,
                extra={"fields": {"jid": job.get("jid"), "class": definition.name}},
            )
