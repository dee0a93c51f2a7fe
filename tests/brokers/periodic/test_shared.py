"""Periodic scheduling on every broker: each tick enqueued once, catch-up, pause, forgetting.

Schedulers are driven with explicit clocks (``Scheduler.declare(now)``, ``take(now)``), so
that ticks, catch-up windows and liveness are exact; one test runs a schedule in a worker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, select

import asynctask
from asynctask import Registry, Settings
from asynctask.api import PeriodicSet, Queue
from asynctask.brokers import Broker, open_broker
from asynctask.brokers.periodic import FORGET_AFTER, SCHEDULER_STALE, Tick
from asynctask.middleware import Chain, TrackingClientMiddleware, TrackingServerMiddleware
from asynctask.periodic import Schedule, Schedules
from asynctask.tracking.models import Event
from asynctask.worker import Worker
from asynctask.worker.periodic import SCHEDULE_FIELD, TICK_FIELD, Scheduler
from tests.conftest import wait_until

T0 = 1_800_000_000  # a whole minute, far from now: the clocks here are explicit


@pytest.fixture
def job_registry() -> Registry:
    registry = Registry()

    @asynctask.job(registry=registry)
    def beat(label: str = "") -> None: ...

    return registry


MakeScheduler = Callable[..., Scheduler]


@pytest.fixture
def make_scheduler(settings: Settings, job_registry: Registry) -> Iterator[MakeScheduler]:
    """Schedulers of their own identity and broker, as separate worker processes have."""
    brokers: list[Broker] = []

    def make(identity: str, *schedules: Schedule) -> Scheduler:
        broker = open_broker(settings)
        brokers.append(broker)
        declared = Schedules()
        for schedule in schedules:
            declared.add(schedule)
        return Scheduler(broker.periodic, declared, job_registry, Chain(), identity)

    yield make
    for broker in brokers:
        broker.close()


def every_second(**fields: object) -> Schedule:
    return Schedule(**{"name": "tick", "job": "beat", "cron": "* * * * * *", **fields})


def queued_ticks(settings: Settings, queue: str = "default") -> list[int]:
    return sorted(int((record.item or {})[TICK_FIELD]) for record in Queue(queue, settings=settings))


def test_two_schedulers_taking_the_same_ticks_enqueue_each_once(
    settings: Settings, make_scheduler: MakeScheduler
) -> None:
    a, b = make_scheduler("a", every_second()), make_scheduler("b", every_second())
    a.declare(T0)
    b.declare(T0)
    pushed = a.take(T0 + 3) + b.take(T0 + 3) + b.take(T0 + 5) + a.take(T0 + 5)
    assert len(pushed) == 5
    assert queued_ticks(settings) == [T0 + 1, T0 + 2, T0 + 3, T0 + 4, T0 + 5]
    job = next(iter(Queue("default", settings=settings))).item or {}
    assert job["class"] == "beat" and job[SCHEDULE_FIELD] == "tick"


def test_racing_threads_push_each_tick_once(settings: Settings, make_scheduler: MakeScheduler) -> None:
    schedulers = [make_scheduler(f"s{i}", every_second()) for i in range(4)]
    schedulers[0].declare(T0)
    pushed: list[str] = []
    start = threading.Barrier(len(schedulers))

    def race(scheduler: Scheduler) -> None:
        start.wait()
        for second in range(1, 21):
            pushed.extend(scheduler.take(T0 + second))

    threads = [threading.Thread(target=race, args=(s,)) for s in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(pushed) == 20
    assert queued_ticks(settings) == [T0 + s for s in range(1, 21)]


def test_a_new_schedule_starts_at_its_next_tick(settings: Settings, make_scheduler: MakeScheduler) -> None:
    a = make_scheduler("a", every_second())
    a.declare(T0 + 0.5)
    assert a.take(T0 + 0.9) == []
    assert len(a.take(T0 + 1)) == 1
    assert queued_ticks(settings) == [T0 + 1]


def test_a_take_shows_no_job_before_its_hold_returns_and_takes_nothing_if_it_says_no(
    settings: Settings, make_scheduler: MakeScheduler
) -> None:
    a = make_scheduler("a", every_second())
    a.declare(T0)
    queued_at_hold: list[list[int]] = []

    def hold(answer: bool) -> Callable[[], bool]:
        def look() -> bool:
            queued_at_hold.append(queued_ticks(settings))
            return answer

        return look

    assert a.store.take(a.prepare(T0 + 2), "a", T0 + 2, hold(False)) == []
    assert queued_ticks(settings) == []
    # Nothing was taken: the same ticks are due again.
    assert len(a.store.take(a.prepare(T0 + 2), "a", T0 + 2, hold(True))) == 2
    assert queued_ticks(settings) == [T0 + 1, T0 + 2]
    assert queued_at_hold == [[], []]


def test_a_job_over_the_payload_limit_passes_its_ticks_without_holding_up_the_others(
    settings: Settings, job_registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    broker = open_broker(settings)
    try:
        declared = Schedules()
        declared.add(every_second(name="huge", args=("x" * 2000,)))
        declared.add(every_second(name="small"))
        scheduler = Scheduler(broker.periodic, declared, job_registry, Chain(), "a", max_payload_bytes=1000)
        scheduler.declare(T0)
        assert len(scheduler.take(T0 + 2)) == 2
    finally:
        broker.close()
    assert queued_ticks(settings) == [T0 + 1, T0 + 2]
    names = {(record.item or {})[SCHEDULE_FIELD] for record in Queue("default", settings=settings)}
    assert names == {"small"}
    huge = PeriodicSet(settings=settings).get("huge")
    assert huge is not None and huge.record.last == T0 + 2
    assert "periodic huge: the job of the tick" in caplog.text


@pytest.mark.parametrize(("rule", "expected"), [("latest", [9]), ("all", [4, 5, 6, 7, 8, 9]), ("none", [])])
def test_ticks_missed_while_every_scheduler_was_down_follow_catch_up(
    settings: Settings, make_scheduler: MakeScheduler, rule: str, expected: list[int]
) -> None:
    first = make_scheduler("first", every_second(catch_up=rule))
    first.declare(T0)
    for second in (1, 2, 3):
        first.take(T0 + second)
    first.store.leave("first")  # a clean stop
    after = make_scheduler("after", every_second(catch_up=rule))
    after.declare(T0 + 9.5)
    after.take(T0 + 9.5)
    assert queued_ticks(settings) == [T0 + s for s in (1, 2, 3, *expected)]
    # Later ticks all run, whatever the rule.
    after.take(T0 + 11)
    assert queued_ticks(settings)[-2:] == [T0 + 10, T0 + 11]


def test_ticks_due_while_another_scheduler_lives_all_run(
    settings: Settings, make_scheduler: MakeScheduler
) -> None:
    first = make_scheduler("first", every_second(catch_up="none"))
    first.declare(T0)
    for second in (1, 2, 3):
        first.take(T0 + second)
    joining = make_scheduler("joining", every_second(catch_up="none"))
    now = T0 + 3 + SCHEDULER_STALE - 1
    joining.declare(now)
    joining.take(now)
    assert joining._others_alive
    assert queued_ticks(settings) == list(range(T0 + 1, int(now) + 1))


def test_a_paused_schedule_passes_its_ticks_without_jobs_until_resumed(
    settings: Settings, make_scheduler: MakeScheduler
) -> None:
    a = make_scheduler("a", every_second())
    a.declare(T0)
    a.take(T0 + 1)
    assert a.store.set_paused("tick", True)
    assert a.take(T0 + 3) == []
    (record,) = a.store.records()
    assert record.paused and record.last == T0 + 3
    assert a.store.set_paused("tick", False)
    a.take(T0 + 4)
    assert queued_ticks(settings) == [T0 + 1, T0 + 4]
    (record,) = a.store.records()
    assert not record.paused and record.last == T0 + 4 and record.last_jid is not None
    assert record.cron == "* * * * * *" and record.job == "beat" and record.queue == "default"
    assert not a.store.set_paused("unknown", True)


def test_a_schedule_nobody_declares_is_forgotten(settings: Settings, make_scheduler: MakeScheduler) -> None:
    old = make_scheduler("old", every_second(name="removed"), every_second(name="kept"))
    old.declare(T0)
    new = make_scheduler("new", every_second(name="kept"))
    new.declare(T0 + FORGET_AFTER - 1)
    assert [r.name for r in new.store.records()] == ["kept", "removed"]
    new.declare(T0 + FORGET_AFTER + 1)
    assert [r.name for r in new.store.records()] == ["kept"]
    # A lagging scheduler cannot bring it back through a take.
    assert new.store.take([Tick("removed", T0 + 70, None)], "old", T0 + 70) == []
    assert [r.name for r in new.store.records()] == ["kept"]


def test_a_tick_whose_job_cannot_be_built_passes_without_one(
    settings: Settings, make_scheduler: MakeScheduler
) -> None:
    def refuse(job: object, queue: str, final: Callable[[], object]) -> object:
        raise RuntimeError("middleware failure")

    a = make_scheduler("a", every_second())
    a.client_chain = Chain([refuse])
    a.declare(T0)
    assert a.take(T0 + 2) == []
    (record,) = a.store.records()
    assert record.last == T0 + 2


def test_a_worker_runs_a_schedule_never_before_its_tick(
    registry: Registry, start_worker: Callable[..., object]
) -> None:
    ran: list[tuple[str, int, float, float]] = []

    @asynctask.job(registry=registry)
    def heartbeat() -> None:
        job = asynctask.current_job().job
        ran.append((str(job[SCHEDULE_FIELD]), int(job[TICK_FIELD]), float(job["enqueued_at"]), time.time()))

    schedules = Schedules()
    asynctask.periodic(heartbeat, cron="* * * * * *", schedules=schedules)
    start_worker(schedules=schedules)
    wait_until(lambda: len(ran) >= 3, timeout=8)
    names, ticks, enqueued, started = zip(*ran, strict=True)
    assert set(names) == {"heartbeat"}
    assert list(ticks) == sorted(set(ticks))
    # The pass starts ahead of the tick; the take, and so the job, waits for it.
    assert all(e >= t and s >= t for t, e, s in zip(ticks, enqueued, started, strict=True)), ran


def test_the_read_api_lists_pauses_and_resumes_schedules(
    settings: Settings, make_scheduler: MakeScheduler
) -> None:
    a = make_scheduler(
        "a", every_second(name="fast"), Schedule("nightly", "beat", "0 3 * * *", tz="Asia/Tokyo")
    )
    a.declare(T0)
    a.take(T0 + 1)
    periodic = PeriodicSet(settings=settings)
    entries = {entry.name: entry for entry in periodic}
    assert list(entries) == ["fast", "nightly"] and periodic.size == 2
    fast, nightly = entries["fast"], entries["nightly"]
    assert fast.record.last == T0 + 1 and fast.record.last_jid and not fast.paused
    # The next run is computed from now (the explicit clocks are in the future here: after the last tick).
    assert fast.next_run == T0 + 2
    assert nightly.next_run is not None and time.gmtime(nightly.next_run).tm_hour == 18  # 03:00 JST
    assert periodic.pause("fast") and periodic.get("fast").paused
    assert a.take(T0 + 2) == []
    assert periodic.resume("fast") and not periodic.get("fast").paused
    assert len(a.take(T0 + 3)) == 1
    assert not periodic.pause("missing") and periodic.get("missing") is None


def test_a_tracked_periodic_job_has_one_event_per_tick_whoever_takes_it(
    settings: Settings, registry: Registry, engine: Engine, start_worker: Callable[..., Worker]
) -> None:
    @asynctask.job(registry=registry, track=True)
    def audit() -> None: ...

    tracked: Chain[Any] = Chain([TrackingClientMiddleware()])
    schedules = Schedules()
    schedules.add(Schedule("audit", "audit", "* * * * * *"))
    brokers = [open_broker(settings) for _ in range(2)]
    schedulers = [Scheduler(b.periodic, schedules, registry, tracked, f"s{i}") for i, b in enumerate(brokers)]
    schedulers[0].declare(T0)
    for second in range(1, 4):
        # Both build the tick's job and its "enqueue"; the loser's must leave no event behind.
        for scheduler in schedulers:
            scheduler.take(T0 + second)
    for broker in brokers:
        broker.close()
    start_worker(server_middleware=Chain([TrackingServerMiddleware()]), flusher="thread")

    def statuses() -> list[str]:
        with engine.connect() as connection:
            return list(connection.execute(select(Event.status).where(Event.job_name == "audit")).scalars())

    wait_until(lambda: statuses() == ["finish"] * 3, 15)


def test_of_the_schedulers_passing_in_one_second_only_the_first_gets_the_lease(
    make_scheduler: MakeScheduler,
) -> None:
    a, b = make_scheduler("a", every_second()), make_scheduler("b", every_second())
    assert a.store.lease("a", T0)
    assert not b.store.lease("b", T0) and not a.store.lease("a", T0)
    assert b.store.lease("b", T0 + 1)
    # Asking is a pass: each sees the other alive, and nobody else.
    assert a.store.others_alive("a", T0 + 1) and b.store.others_alive("b", T0 + 1)
    assert not make_scheduler("c").store.others_alive("a", T0 + 1 + SCHEDULER_STALE + 1)
