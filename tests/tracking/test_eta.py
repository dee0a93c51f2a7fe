"""The ETA estimator alone: which rate it goes by, and when it gives none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from asynctask.tracking.eta import RATE_MARK, RateMark, eta_seconds, read_mark

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def test_the_rate_since_the_first_start() -> None:
    # 100 ended in 10 s: 10 a second, 400 left.
    assert eta_seconds(remaining=400, ended=100, started_at=ago(10), now=NOW) == 40.0


@pytest.mark.parametrize(
    ("remaining", "ended", "started"),
    [(400, 0, ago(10)), (0, 100, ago(10)), (400, 100, None), (400, 100, NOW), (400, 100, ago(-1))],
    ids=["nothing-ended", "nothing-left", "never-started", "no-time-yet", "clock-behind"],
)
def test_no_rate_or_nothing_left_gives_no_eta(remaining: int, ended: int, started: datetime | None) -> None:
    assert eta_seconds(remaining=remaining, ended=ended, started_at=started, now=NOW) is None


def test_the_rate_since_the_last_change_once_a_turn_of_the_slots_has_ended_since() -> None:
    # 100 ended in the first 10 s; the change 2 s ago, 40 ended since: 20 a second.
    mark = RateMark(ago(2), 60)
    assert eta_seconds(remaining=400, ended=100, started_at=ago(10), now=NOW, mark=mark, fresh=40) == 20.0
    # Fewer than `fresh` since the change: the whole run's rate stands in.
    assert eta_seconds(remaining=400, ended=100, started_at=ago(10), now=NOW, mark=mark, fresh=41) == 40.0


def test_a_mark_above_the_count_is_not_used() -> None:
    # A retry moved failed jobs back: fewer have ended than when the feed last changed.
    mark = RateMark(ago(2), 150)
    assert eta_seconds(remaining=400, ended=100, started_at=ago(10), now=NOW, mark=mark) == 40.0


def test_a_mark_reads_back_and_anything_else_is_no_mark() -> None:
    mark = RateMark(ago(2), 60)
    assert read_mark({"parallel": 5, RATE_MARK: mark.as_json()}) == mark
    for stored in (
        None,
        {},
        {RATE_MARK: None},
        {RATE_MARK: {"at": "yesterday", "ended": 1}},
        {RATE_MARK: {"at": float("nan"), "ended": 1}},
        {RATE_MARK: {"at": 1.0, "ended": -1}},
        {RATE_MARK: {"at": 1.0, "ended": True}},
        {RATE_MARK: {"at": 1.0}},
    ):
        assert read_mark(stored) is None, stored
