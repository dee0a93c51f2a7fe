"""The measures the flow suite judges brokers by: a mistake here would let a broken broker pass."""

from __future__ import annotations

import pytest

from tests.brokers.flow.support import (
    Event,
    Interval,
    intervals,
    max_overlap,
    mean_keys_running,
    most_in_window,
)


def run(key: str, start: float, end: float | None, seq: int = 0) -> Interval:
    return Interval(f"{key}-{seq}", key, seq, start, end, None if end is None else "done")


def test_a_sliding_window_finds_bursts_that_straddle_a_boundary() -> None:
    # 20 starts late in one second and 20 early in the next: a per-second counter sees 20 and 20.
    times = [0.9 + i * 0.004 for i in range(20)] + [1.0 + i * 0.004 for i in range(20)]
    assert most_in_window(times, 1.0) == 40
    assert most_in_window([0.0, 0.5, 1.0, 1.5], 1.0) == 2  # half-open: 1.0 is not in [0, 1)
    assert most_in_window([], 1.0) == 0


def test_overlap_counts_runs_in_progress_and_lets_a_run_start_as_another_ends() -> None:
    assert max_overlap([run("a", 0, 1), run("a", 1, 2, 1)]) == 1
    assert max_overlap([run("a", 0, 2), run("a", 1, 3, 1), run("a", 1.5, 4, 2)]) == 3
    assert max_overlap([run("a", 0, None), run("a", 1, 2, 1)], open_until=1.5) == 2
    with pytest.raises(AssertionError):
        max_overlap([run("a", 0, None)])


def test_mean_keys_running_weighs_each_key_by_the_time_it_runs() -> None:
    # Two keys for the first second, one for the next: 1.5 on average over 2 s.
    assert mean_keys_running([run("a", 0, 2), run("b", 0, 1)]) == pytest.approx(1.5)
    # Two jobs of one key at once count once.
    assert mean_keys_running([run("a", 0, 1), run("a", 0, 1, 1)]) == pytest.approx(1.0)


def test_a_start_without_an_end_before_the_next_start_of_its_job_was_cut_short() -> None:
    events = [
        Event("start", "j1", 1, 0.0, "k", 0, -1),
        Event("start", "j1", 2, 5.0, "k", 0, -1),
        Event("done", "j1", 2, 6.0, "k", 0, -1),
        Event("start", "j2", 2, 6.5, "k", 1, -1),
    ]
    assert [(r.start, r.end, r.outcome) for r in intervals(events)] == [
        (0.0, None, None),
        (5.0, 6.0, "done"),
        (6.5, None, None),
    ]
