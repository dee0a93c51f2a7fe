"""Schedules: their ticks (time zones and DST with fixed clocks), what is due, catch-up rules."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

import asynctask
from asynctask import Registry
from asynctask.periodic import Schedule, Schedules
from asynctask.periodic.schedule import MAX_TICKS_PER_PASS

NEW_YORK = ZoneInfo("America/New_York")


def at(*fields: int, tz: ZoneInfo | None = None) -> int:
    return int(datetime(*fields, tzinfo=tz or UTC).timestamp())


def utc(tick: int) -> str:
    return datetime.fromtimestamp(tick, UTC).strftime("%Y-%m-%d %H:%M:%S")


def test_five_fields_tick_on_minutes_and_six_fields_lead_with_seconds() -> None:
    five = Schedule("five", "job", "*/15 * * * *")
    assert [utc(t) for t in five.due(at(2026, 1, 1, 0, 0), at(2026, 1, 1, 0, 45))] == [
        "2026-01-01 00:15:00",
        "2026-01-01 00:30:00",
        "2026-01-01 00:45:00",
    ]
    six = Schedule("six", "job", "*/20 * * * * *")
    assert [utc(t) for t in six.due(at(2026, 1, 1, 0, 0), at(2026, 1, 1, 0, 1))] == [
        "2026-01-01 00:00:20",
        "2026-01-01 00:00:40",
        "2026-01-01 00:01:00",
    ]


def test_a_daily_time_in_a_zone_is_local() -> None:
    nightly = Schedule("nightly", "job", "0 3 * * *", tz="Asia/Tokyo")
    assert utc(nightly.next_tick(at(2026, 6, 1))) == "2026-06-01 18:00:00"  # 03:00 JST


def test_spring_forward_a_skipped_time_runs_once_just_after_the_gap() -> None:
    # 2026-03-08: New York's clocks go from 02:00 to 03:00; 02:30 does not exist that day.
    daily = Schedule("d", "job", "30 2 * * *", tz="America/New_York")
    ticks = list(zip(range(3), daily.ticks_after(at(2026, 3, 7, 12, tz=NEW_YORK)), strict=False))
    local = [datetime.fromtimestamp(t, NEW_YORK).strftime("%m-%d %H:%M %Z") for _, t in ticks]
    assert local == ["03-08 03:00 EDT", "03-09 02:30 EDT", "03-10 02:30 EDT"]


def test_fall_back_a_repeated_time_runs_once() -> None:
    # 2026-11-01: New York's 01:00-02:00 happens twice (EDT, then EST).
    daily = Schedule("d", "job", "30 1 * * *", tz="America/New_York")
    ticks = [t for _, t in zip(range(2), daily.ticks_after(at(2026, 10, 31, 12, tz=NEW_YORK)), strict=False)]
    assert [utc(t) for t in ticks] == ["2026-11-01 05:30:00", "2026-11-02 06:30:00"]


def test_through_a_change_an_interval_keeps_its_pace_in_absolute_time() -> None:
    every = Schedule("e", "job", "*/30 * * * *", tz="America/New_York", max_catch_up=86400)
    ticks = every.due(at(2026, 11, 1, 4, 50), at(2026, 11, 1, 7, 40))
    # Every half hour of UTC, the repeated local hour included: none lost, none doubled.
    assert [utc(t)[11:16] for t in ticks] == ["05:00", "05:30", "06:00", "06:30", "07:00", "07:30"]


def test_due_is_the_ticks_after_last_up_to_now_inclusive() -> None:
    s = Schedule("s", "job", "* * * * * *")
    assert s.due(100, 103) == [101, 102, 103]
    assert s.due(103, 103.9) == []
    assert s.due(None, 103) == []


def test_due_looks_back_max_catch_up_seconds_and_a_bounded_number_of_ticks() -> None:
    s = Schedule("s", "job", "* * * * * *", max_catch_up=10)
    assert s.due(0, 1000) == list(range(990, 1001))
    wide = Schedule("w", "job", "* * * * * *", max_catch_up=100_000)
    due = wide.due(0, 50_000)
    assert len(due) == MAX_TICKS_PER_PASS and due[-1] == 50_000


def test_missed_ticks_follow_catch_up_and_live_ones_all_run() -> None:
    due = [1, 2, 3, 4, 5]
    for rule, missed in (("latest", [5]), ("all", due), ("none", [])):
        s = Schedule("s", "job", "* * * * * *", catch_up=rule)
        assert s.to_enqueue(due, missed=True) == missed
        assert s.to_enqueue(due, missed=False) == due


@pytest.mark.parametrize(
    "fields",
    [
        {"cron": "61 * * * *"},
        {"cron": "* * *"},
        {"tz": "Mars/Olympus"},
        {"catch_up": "some"},
        {"name": ""},
        {"name": "has space"},
        {"max_catch_up": -1},
        {"queue": ""},
    ],
)
def test_a_bad_schedule_is_refused_when_declared(fields: dict[str, object]) -> None:
    base: dict[str, object] = {"name": "s", "job": "job", "cron": "* * * * *"}
    with pytest.raises(ValueError):
        Schedule(**{**base, **fields})


def test_periodic_declares_a_job_by_call_or_stacked_as_a_decorator() -> None:
    registry, schedules = Registry(), Schedules()

    @asynctask.periodic(cron="0 3 * * *", name="nightly", schedules=schedules)
    @asynctask.job(registry=registry)
    def report(day: str = "today") -> None: ...

    asynctask.periodic(report, cron="*/5 * * * *", args=["yesterday"], schedules=schedules)
    by_name = {s.name: s for s in schedules}
    assert by_name["nightly"].job == "report" and by_name["nightly"].cron == "0 3 * * *"
    assert by_name["report"].args == ("yesterday",)
    with pytest.raises(ValueError, match="already declared"):
        asynctask.periodic(report, cron="* * * * *", name="nightly", schedules=schedules)
    with pytest.raises(asynctask.JobArgumentsError):
        asynctask.periodic(report, cron="* * * * *", args=[1, 2], name="x", schedules=schedules)
    with pytest.raises(TypeError):
        asynctask.periodic(lambda: None, cron="* * * * *", schedules=schedules)  # type: ignore[call-overload]


def test_the_latest_tick_is_at_or_before_now_however_far_back() -> None:
    assert Schedule("s", "job", "* * * * * *").latest_tick(100.5) == 100
    assert Schedule("s", "job", "* * * * * *").latest_tick(100) == 100
    yearly = Schedule("y", "job", "0 0 1 1 *")
    assert utc(yearly.latest_tick(at(2026, 11, 23))) == "2026-01-01 00:00:00"
