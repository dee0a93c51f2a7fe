"""The retrier on its own, over the real Redis broker: for each way a failed job can go (retry
set, dead set, dropped), where it ends up, that its claim is released, what its tracked event is
told, which hooks run, and what is logged when a job's own retry_in or exhausted hook fails.
(tests/brokers/test_failures.py runs the same through whole workers on every backend.)"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pytest
import redis

import asynctask
from asynctask import Registry, Settings, context, payload
from asynctask.api import DeadSet, RetrySet, SortedEntry
from asynctask.brokers import Broker, Fetcher, UnitOfWork, open_broker
from asynctask.context import JobContext
from asynctask.job import JobDefinition
from asynctask.keys import Keys
from asynctask.middleware import TrackingServerMiddleware
from asynctask.tracking.outbox import pack
from asynctask.tracking.status import EventStatus
from asynctask.tracking.tracker import Tracker
from asynctask.tracking.transitions import decode_entry, status
from asynctask.worker.retry import Retrier, record_error

#: Sidekiq's backoff at retry_count 0: 15 s plus up to 9 s of jitter.
FIRST_DELAY = (15, 15 + 9 + 1)


@dataclass
class Rig:
    """A broker, the fetcher of a pretend worker process, its (unstarted) tracker and a retrier."""

    settings: Settings
    conn: redis.Redis
    broker: Broker
    fetch: Fetcher
    tracker: Tracker
    retrier: Retrier
    hooked: list[tuple[str, BaseException]] = field(default_factory=list)

    def claim(self, job: payload.JobDict) -> tuple[UnitOfWork, payload.JobDict]:
        """Enqueue ``job`` and claim it, as a worker fetching it would."""
        self.broker.push([(job, None)])
        [unit] = self.fetch.claim(1, [], [])
        return unit, payload.loads(unit.payload)

    def fail(self, definition: JobDefinition[Any], exc: BaseException, **fields: Any) -> payload.JobDict:
        """Claim a tracked job of ``definition`` and fail it with ``exc``; return the job."""
        job = {**self.job(definition), "track": True, **fields}
        unit, claimed = self.claim(job)
        self.retrier.failed(unit, claimed, definition, exc)
        return claimed

    def job(self, definition: JobDefinition[Any]) -> payload.JobDict:
        return {
            **definition.options.payload_head(),
            "class": definition.name,
            "args": [],
            "jid": payload.new_jid(),
            "created_at": payload.now(),
        }

    def recorded(self) -> list[tuple[str, str, str | None]]:
        """(jid, kind, text) of every tracking transition: written to the stream, then pending."""
        stream = Keys(self.settings.namespace).tracking_stream
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], self.conn.xrange(stream))
        found = [t for _, entry in entries for t in decode_entry(int(entry[b"s"]), entry[b"d"])]
        with self.tracker.outbox.draining() as pending:
            found += decode_entry(0, pack(pending)) if pending else []
        return [(t.jid, t.kind, t.text) for t in found]

    def retries(self) -> list[SortedEntry]:
        return list(RetrySet(settings=self.settings))

    def dead(self) -> list[SortedEntry]:
        return list(DeadSet(settings=self.settings))


@pytest.fixture
def rig(redis_settings: Settings, conn: redis.Redis) -> Iterator[Rig]:
    broker = open_broker(redis_settings)
    fetch = broker.fetcher("retrier-test")
    fetch.register()
    tracker = Tracker(broker.tracking, fetch)
    yield Rig(redis_settings, conn, broker, fetch, tracker, Retrier(broker, redis_settings, tracker))
    broker.close()


def define(registry: Registry, rig: Rig, **options: Any) -> JobDefinition[Any]:
    """A job definition whose retries-exhausted hook records what it was given."""

    @asynctask.job(registry=registry, name=f"failing_{len(registry)}", **options)
    def failing() -> None:
        pass

    @failing.on_retries_exhausted
    def note(job: dict[str, Any], exc: BaseException) -> None:
        rig.hooked.append((job["jid"], exc))

    return failing


def test_a_retry_goes_to_the_retry_set_with_its_transition_in_the_same_write(
    rig: Rig, registry: Registry
) -> None:
    definition = define(registry, rig, retry=2)
    error = ValueError("bad row")
    job = rig.fail(definition, error)
    [entry] = rig.retries()
    assert (entry.jid, entry.retry_count, entry.error_message, entry.error_class) == (
        job["jid"],
        0,
        "bad row",
        "ValueError",
    )
    assert entry.failed_at is not None and FIRST_DELAY[0] <= entry.score - entry.failed_at <= FIRST_DELAY[1]
    assert rig.fetch.held() == [] and rig.dead() == [] and rig.hooked == []
    # In the stream already, not left for a later write: no process can retry the job before
    # its event says it waits.
    stream = Keys(rig.settings.namespace).tracking_stream
    assert rig.conn.xlen(stream) == 1 and len(rig.tracker.outbox) == 0
    assert rig.recorded() == [(job["jid"], "enqueue", "waiting for retry 1 of 2")]


@pytest.mark.parametrize(
    ("options", "retry_in", "outcome", "buried", "hooked"),
    [
        ({"retry": False}, None, "not retried (retry: false)", False, True),
        ({"retry": 0}, None, "no retries left; moved to the dead set", True, True),
        ({"retry": 0, "dead": False}, None, "no retries left; dropped (dead: false)", False, True),
        ({"retry": 3}, "kill", "no retries left; moved to the dead set", True, True),
        ({"retry": 3}, "discard", "discarded by retry_in", False, False),
    ],
)
def test_a_job_given_up_is_released_and_its_event_says_where_it_went(
    rig: Rig,
    registry: Registry,
    options: dict[str, Any],
    retry_in: str | None,
    outcome: str,
    buried: bool,
    hooked: bool,
) -> None:
    definition = define(registry, rig, **options)
    if retry_in is not None:
        definition.retry_in(lambda count, exc, job: retry_in)
    error = KeyError("gone")
    job = rig.fail(definition, error)
    assert rig.fetch.held() == [] and rig.retries() == []
    assert [entry.jid for entry in rig.dead()] == ([job["jid"]] if buried else [])
    assert rig.hooked == ([(job["jid"], error)] if hooked else [])
    assert rig.recorded() == [(job["jid"], "log", outcome)]


def test_without_tracking_a_job_is_retried_or_given_up_all_the_same(rig: Rig, registry: Registry) -> None:
    rig.retrier = Retrier(rig.broker, rig.settings)
    retried = rig.fail(define(registry, rig, retry=1), ValueError("x"))
    dropped = rig.fail(define(registry, rig, retry=False), ValueError("y"))
    buried = rig.fail(define(registry, rig, retry=0), ValueError("z"))
    assert [e.jid for e in rig.retries()] == [retried["jid"]] and [e.jid for e in rig.dead()] == [
        buried["jid"]
    ]
    assert [jid for jid, _ in rig.hooked] == [dropped["jid"], buried["jid"]]
    assert rig.fetch.held() == [] and rig.recorded() == []


def test_retry_true_allows_settings_max_retries(rig: Rig, registry: Registry) -> None:
    definition = define(registry, rig, retry=True)
    # The fifth failure of a job: below Sidekiq's 25, so it is retried...
    job = rig.fail(definition, ValueError("again"), retry_count=3)
    assert [(e.jid, e.retry_count) for e in rig.retries()] == [(job["jid"], 4)]
    # ...but not when the worker allows four retries.
    rig.retrier.settings = replace(rig.settings, max_retries=4)
    other = rig.fail(definition, ValueError("again"), retry_count=3)
    assert [e.jid for e in rig.dead()] == [other["jid"]] and len(rig.retries()) == 1


def test_a_job_without_a_retry_field_is_retried_as_sidekiq_does(rig: Rig, registry: Registry) -> None:
    definition = define(registry, rig)
    # Pushed by another service: no "retry" key at all.
    job = {k: v for k, v in rig.job(definition).items() if k != "retry"}
    unit, claimed = rig.claim(job)
    rig.retrier.failed(unit, claimed, definition, ValueError("x"))
    assert [entry.jid for entry in rig.retries()] == [job["jid"]]


def test_a_job_pushed_without_a_queue_is_retried_into_the_queue_it_was_claimed_from(
    rig: Rig, registry: Registry
) -> None:
    definition = define(registry, rig)
    # Written straight into the queue's list by another service, with no "queue" key: the
    # claim knows which queue it came from.
    job = {k: v for k, v in rig.job(definition).items() if k != "queue"}
    rig.conn.lpush(Keys(rig.settings.namespace).queue("default"), json.dumps(job))
    [unit] = rig.fetch.claim(1, [], [])
    claimed = payload.loads(unit.payload)
    assert "queue" not in claimed
    rig.retrier.failed(unit, claimed, definition, ValueError("x"))
    [entry] = rig.retries()
    assert entry.get("queue") == unit.queue == "default"


def test_retry_in_is_given_the_count_the_error_and_the_job(rig: Rig, registry: Registry) -> None:
    definition = define(registry, rig, retry=5)
    seen: list[tuple[int, BaseException, str]] = []

    @definition.retry_in
    def later(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        seen.append((count, exc, job["jid"]))
        return 100.0

    error = ValueError("third time")
    job = rig.fail(definition, error, retry_count=1, failed_at=payload.now())
    assert seen == [(2, error, job["jid"])]
    [entry] = rig.retries()
    # 100 s plus Sidekiq's jitter, rand(10) * (count + 1).
    assert entry.retried_at is not None and 100 <= entry.score - entry.retried_at <= 100 + 9 * 3 + 1


@pytest.mark.parametrize("answer", [None, 0, -5, "soon"])
def test_retry_in_without_a_positive_delay_falls_back_to_sidekiqs_backoff(
    rig: Rig, registry: Registry, answer: Any
) -> None:
    definition = define(registry, rig, retry=5)
    definition.retry_in(lambda count, exc, job: answer)
    rig.fail(definition, ValueError("x"))
    [entry] = rig.retries()
    assert entry.failed_at is not None and FIRST_DELAY[0] <= entry.score - entry.failed_at <= FIRST_DELAY[1]


def test_a_failing_retry_in_is_logged_and_the_default_backoff_used(
    rig: Rig, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    definition = define(registry, rig, retry=5)
    broken = ZeroDivisionError("in retry_in")

    @definition.retry_in
    def crash(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        raise broken

    with caplog.at_level(logging.ERROR, logger="asynctask.retry"):
        rig.fail(definition, ValueError("x"))
    [entry] = rig.retries()
    assert entry.failed_at is not None and FIRST_DELAY[0] <= entry.score - entry.failed_at <= FIRST_DELAY[1]
    [record] = caplog.records
    assert record.getMessage() == f"retry_in of {definition.name} failed; using the default delay"
    assert record.exc_info is not None and record.exc_info[1] is broken


def test_a_failing_exhausted_hook_is_logged_and_the_job_still_dies(
    rig: Rig, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    @asynctask.job(registry=registry, retry=0)
    def doomed() -> None:
        pass

    broken = RuntimeError("in the hook")

    @doomed.on_retries_exhausted
    def crash(job: dict[str, Any], exc: BaseException) -> None:
        raise broken

    with caplog.at_level(logging.ERROR, logger="asynctask.retry"):
        job = rig.fail(doomed, ValueError("x"))
    assert [entry.jid for entry in rig.dead()] == [job["jid"]] and rig.fetch.held() == []
    [record] = caplog.records
    assert record.getMessage() == "retries-exhausted hook of doomed failed"
    assert record.fields == {"jid": job["jid"], "class": "doomed"}  # type: ignore[attr-defined]
    assert record.exc_info is not None and record.exc_info[1] is broken


def test_a_job_that_cannot_run_is_buried_released_and_its_event_says_why(
    rig: Rig, registry: Registry
) -> None:
    definition = define(registry, rig, retry=5)
    job = {**rig.job(definition), "track": True}
    unit, claimed = rig.claim(job)
    rig.retrier.bury(unit, claimed, TypeError("takes no arguments"))
    [entry] = rig.dead()
    assert (entry.jid, entry.error_class, entry.retry_count) == (job["jid"], "TypeError", 0)
    assert rig.fetch.held() == [] and rig.retries() == [] and rig.hooked == []
    assert rig.recorded() == [
        (job["jid"], "error", "cannot run: takes no arguments; moved to the dead set"),
    ]


def _raise_from_two_frames() -> None:
    def inner() -> None:
        raise ValueError("deep")

    inner()


def _failure() -> BaseException:
    try:
        _raise_from_two_frames()
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("backtrace", "lines"),
    [
        (None, None),
        (False, None),
        (0, None),
        (True, ["inner", "_raise_from_two_frames", "_failure"]),
        (2, ["inner", "_raise_from_two_frames"]),
    ],
)
def test_the_backtrace_is_kept_only_when_asked_and_as_deep_as_asked(
    backtrace: bool | int | None, lines: list[str] | None
) -> None:
    job: payload.JobDict = {"class": "x", "args": [], "jid": "j"}
    if backtrace is not None:
        job["backtrace"] = backtrace
    assert record_error(job, _failure()) == 0
    if lines is None:
        assert "error_backtrace" not in job
        return
    kept = payload.decompress_backtrace(job["error_backtrace"])
    assert [line.rpartition("in `")[2].rstrip("'") for line in kept] == lines


def test_a_failure_without_a_traceback_keeps_no_backtrace() -> None:
    job: payload.JobDict = {"class": "x", "args": [], "jid": "j", "backtrace": True}
    record_error(job, ValueError("never raised"))
    assert "error_backtrace" not in job


def test_later_failures_count_up_and_keep_the_first_failure_time() -> None:
    job: payload.JobDict = {"class": "x", "args": [], "jid": "j"}
    assert record_error(job, ValueError("one")) == 0
    first = job["failed_at"]
    assert "retried_at" not in job
    assert record_error(job, KeyError("two")) == 1
    assert job["failed_at"] == first and job["retried_at"] >= first
    assert (job["retry_count"], job["error_class"], job["error_message"]) == (1, "KeyError", "'two'")
    assert record_error(job, ValueError("x" * 20_000)) == 2
    assert job["error_message"] == "x" * 10_000


def test_a_failed_jobs_error_is_written_with_its_retry_never_alone(rig: Rig, registry: Registry) -> None:
    """Between the job's failure and the retrier's decision, a sender drain (the tracker's
    thread writes whatever waits, every 0.1 s) must not write the ``error`` alone: the task
    would read as finished while the job is about to run again."""
    definition = define(registry, rig, retry=2)
    job = {**rig.job(definition), "track": True}
    unit, claimed = rig.claim(job)
    context.enter(JobContext(claimed, unit.queue, rig.tracker))
    try:
        with pytest.raises(ValueError):
            TrackingServerMiddleware()(definition, claimed, unit.queue, lambda: int("not a number"))
    finally:
        context.enter(None)
    stream = Keys(rig.settings.namespace).tracking_stream

    def entries() -> list[list[tuple[str, str | None]]]:
        written = cast(list[tuple[bytes, dict[bytes, bytes]]], rig.conn.xrange(stream))
        return [[(t.kind, t.text) for t in decode_entry(0, entry[b"d"])] for _, entry in written]

    rig.tracker.store.record(rig.tracker.outbox)  # the sender's drain
    assert entries() == [[("working", "started")]]

    rig.retrier.failed(unit, claimed, definition, ValueError("bad row"))
    assert entries()[-1] == [
        ("error", "ValueError: invalid literal for int() with base 10: 'not a number'"),
        ("enqueue", "waiting for retry 1 of 2"),
    ]


def test_an_error_held_for_a_job_whose_failure_is_never_handled_goes_out_when_it_settles(
    rig: Rig,
) -> None:
    rig.tracker.record_pending(status("j1", EventStatus.ERROR, "boom"))
    rig.tracker.record(status("j2", EventStatus.WORKING, "started"))
    assert len(rig.tracker.outbox) == 1
    rig.tracker.settled("j1")
    assert [(jid, kind) for jid, kind, _ in rig.recorded()] == [("j2", "working"), ("j1", "error")]
