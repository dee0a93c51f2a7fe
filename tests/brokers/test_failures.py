"""Failures on every backend: retries with Sidekiq's fields and backoff, limits, the dead set
and its trimming, business failures, and jobs that cannot run at all."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import asynctask
from asynctask import Client, JobFailed, Registry, Settings
from asynctask.api import DeadSet, Queue, RetrySet, SortedEntry, Stats
from asynctask.payload import decompress_backtrace
from asynctask.worker import Worker
from tests.brokers.conftest import JobKind, MakeClient
from tests.conftest import wait_until

StartWorker = Callable[..., Worker]


def test_a_failure_goes_to_the_retry_set_with_sidekiq_fields_and_backoff(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    def check(n: int) -> None:
        raise ValueError(f"bad input {n}")

    @asynctask.job(registry=registry, backtrace=True)
    def flaky(n: int) -> None:
        check(n)

    @asynctask.job(registry=registry)
    def soon() -> None:
        raise KeyError("soon")

    @soon.retry_in
    def one_second(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        return 1.0

    jid = flaky.set(client=client).perform_async(7)
    soon_jid = soon.set(client=client).perform_async()
    start = time.time()
    start_worker()
    retries = RetrySet(settings=settings)
    wait_until(lambda: retries.size == 2)
    entries = {entry.jid: entry for entry in retries}
    job = entries[jid]
    assert (job.error_message, job.error_class, job.retry_count) == ("bad input 7", "ValueError", 0)
    assert job.failed_at is not None and start - 1 <= job.failed_at <= time.time()
    assert job.retried_at is None and job.args == [7]
    # Sidekiq's backoff: count**4 + 15 + rand(10) * (count + 1) seconds.
    assert 15 <= job.score - job.failed_at <= 15 + 9 + 1
    # The job's own frames, innermost first; none of the runtime's that called it.
    backtrace = decompress_backtrace(job.get("error_backtrace"))
    assert [line.rpartition(":in ")[2] for line in backtrace] == ["`check'", "`flaky'"]
    assert all(line.startswith(__file__) for line in backtrace)
    custom = entries[soon_jid]
    assert custom.failed_at is not None and (custom.error_class, custom.error_message) == (
        "KeyError",
        "'soon'",
    )
    assert 1 <= custom.score - custom.failed_at <= 1 + 9 + 1  # retry_in plus Sidekiq's jitter
    assert Queue("default", settings=settings).size == 0


def test_later_failures_back_off_by_their_retry_count(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    counts: list[int] = []

    @asynctask.job(registry=registry, retry=10)
    def again() -> None:
        raise ValueError("still failing")

    @asynctask.job(registry=registry, retry=10)
    def custom_again(n: int) -> None:
        raise ValueError("still failing")

    @custom_again.retry_in
    def two_seconds(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        counts.append(count)
        return 2.0

    # As jobs come back from the retry set after their fourth failure.
    failed_at = time.time() - 600
    earlier = {"retry": 10, "retry_count": 3, "failed_at": failed_at}
    jid = client.push({"class": "again", "args": [], **earlier})
    custom = [client.push({"class": "custom_again", "args": [n], **earlier}) for n in range(10)]
    start_worker()
    retries = RetrySet(settings=settings)
    wait_until(lambda: retries.size == 11)
    entries = {entry.jid: entry for entry in retries}
    job = entries[jid]
    assert job.retry_count == 4 and job.failed_at == failed_at
    assert job.retried_at is not None and job.retried_at > failed_at
    # Sidekiq's backoff for retry_count 4: 4**4 + 15 + rand(10) * 5 seconds.
    assert 271 <= job.score - job.retried_at <= 271 + 45 + 1
    assert counts == [4] * 10
    jitters = []
    for entry in (entries[jid] for jid in custom):
        assert entry.retry_count == 4 and entry.retried_at is not None
        jitters.append(entry.score - entry.retried_at - 2)
    # retry_in's 2 s plus Sidekiq's jitter, rand(10) * (count + 1): multiples of 5 s, not all
    # zero (the chance of that is 10**-10).
    assert all(-0.5 < j <= 45 + 0.5 and abs(j - 5 * round(j / 5)) < 0.5 for j in jitters), jitters
    assert max(jitters) > 4.5, jitters


def test_a_due_retry_runs_again_then_the_job_dies_and_the_hook_runs(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker, job_kind: JobKind
) -> None:
    attempts: list[int | None] = []
    exhausted: list[tuple[str, str, int]] = []

    @asynctask.job(registry=registry, retry=1)
    @job_kind
    def always_fails() -> None:
        attempts.append(asynctask.current_job().retry_count)
        raise RuntimeError("nope")

    @always_fails.retry_in
    def quickly(count: int, exc: BaseException, job: dict[str, Any]) -> float:
        return 0.01

    @always_fails.on_retries_exhausted
    def note(job: dict[str, Any], exc: BaseException) -> None:
        exhausted.append((job["jid"], str(exc), job["retry_count"]))

    jid = always_fails.set(client=client).perform_async()
    start_worker()
    retries = RetrySet(settings=settings)
    [first] = wait_until(lambda: list(retries))
    assert first.retry_count == 0 and first.retried_at is None
    # The poller retries it when due: within Sidekiq's jitter of at most 9 s.
    dead = DeadSet(settings=settings)
    [died] = wait_until(lambda: list(dead), timeout=15)
    assert attempts == [None, 0]
    assert (died.jid, died.retry_count, died.error_message) == (jid, 1, "nope")
    assert died.retried_at is not None and died.failed_at is not None and died.retried_at > died.failed_at
    assert exhausted == [(jid, "nope", 1)]
    assert retries.size == 0


def test_retry_limits_zero_false_and_dead_false(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    ran: list[str] = []
    hooked: list[str] = []

    def hook(job: dict[str, Any], exc: BaseException) -> None:
        hooked.append(job["class"])

    @asynctask.job(registry=registry, retry=0)
    def to_dead() -> None:
        ran.append("to_dead")
        raise KeyError("x")

    @asynctask.job(registry=registry, retry=False)
    def dropped() -> None:
        ran.append("dropped")
        raise KeyError("y")

    @asynctask.job(registry=registry, retry=3, dead=False)
    def no_morgue() -> None:
        ran.append("no_morgue")
        raise KeyError("z")

    @no_morgue.retry_in
    def kill_now(count: int, exc: BaseException, job: dict[str, Any]) -> str:
        return "kill"

    for definition in (to_dead, dropped, no_morgue):
        definition.on_retries_exhausted(hook)
    jid = to_dead.set(client=client).perform_async()
    dropped.set(client=client).perform_async()
    no_morgue.set(client=client).perform_async()
    stats = Stats(settings=settings)
    start_worker()
    dead = DeadSet(settings=settings)
    [buried] = wait_until(lambda: list(dead))
    assert buried.jid == jid and buried.error_class == "KeyError" and buried.retry_count == 0
    wait_until(lambda: sorted(hooked) == ["dropped", "no_morgue", "to_dead"])
    wait_until(lambda: stats.refresh().failed == 3)
    assert sorted(ran) == ["dropped", "no_morgue", "to_dead"]
    assert (stats.retry_size, stats.dead_size, stats.enqueued) == (0, 1, 0)


def test_the_dead_set_is_trimmed_by_count_and_by_age(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker
) -> None:
    @asynctask.job(registry=registry, retry=0)
    def doomed(n: int) -> None:
        raise ValueError(str(n))

    start_worker(concurrency=1, dead_max_jobs=3, dead_timeout=2)
    dead = DeadSet(settings=settings)
    for n in range(5):
        # One at a time, so that their deaths are ordered.
        doomed.set(client=client).perform_async(n)
        wait_until(lambda n=n: [e.args[0] for e in dead][:1] == [n])
    assert sorted(e.args[0] for e in dead) == [2, 3, 4]
    time.sleep(2.2)
    doomed.set(client=client).perform_async(5)
    wait_until(lambda: [e.args[0] for e in dead] == [5])


def test_a_business_failure_is_done_not_retried_nor_counted_failed(
    registry: Registry, client: Client, settings: Settings, start_worker: StartWorker, job_kind: JobKind
) -> None:
    ran: list[str] = []

    @asynctask.job(registry=registry)
    @job_kind
    def refuse() -> None:
        ran.append(asynctask.current_job().jid)
        raise JobFailed("seller does not qualify")

    jid = refuse.set(client=client).perform_async()
    stats = Stats(settings=settings)
    start_worker()
    wait_until(lambda: stats.refresh().processed == 1)
    assert ran == [jid]
    assert (stats.failed, stats.retry_size, stats.dead_size, stats.enqueued) == (0, 0, 0, 0)


def test_jobs_that_cannot_run_are_buried_in_the_dead_set(
    registry: Registry, settings: Settings, make_client: MakeClient, start_worker: StartWorker
) -> None:
    ran: list[Any] = []

    @asynctask.job(registry=registry)
    def add(a: int, b: int) -> None:
        ran.append((a, b))

    # A client that knows none of the worker's jobs (as another service would), and accepts
    # payloads bigger than the worker does.
    pusher = make_client(registry=Registry(), max_payload_bytes=100_000)
    unknown = pusher.push({"class": "NoSuchJob", "args": [1]})
    bad_args = pusher.push({"class": "add", "args": [1, 2, 3]})
    too_big = pusher.push({"class": "add", "args": [1, "x" * 5000]})
    fine = pusher.push({"class": "add", "args": [1, 2]})
    start_worker(max_payload_bytes=2000)
    dead = DeadSet(settings=settings)
    wait_until(lambda: dead.size == 3)
    wait_until(lambda: ran == [(1, 2)])
    by_jid: dict[str | None, SortedEntry] = {entry.jid: entry for entry in dead}
    assert "'NoSuchJob' is not registered" in (by_jid[unknown].error_message or "")
    assert by_jid[bad_args].error_class == "asynctask.JobArgumentsError"
    # The oversized payload is not decoded; its text is kept as the dead entry's argument.
    [oversized] = [entry for jid, entry in by_jid.items() if jid not in (unknown, bad_args)]
    assert oversized.error_message is not None and "max_payload_bytes" in oversized.error_message
    assert too_big is not None and too_big in oversized.args[0]
    assert fine not in by_jid
    assert RetrySet(settings=settings).size == 0
