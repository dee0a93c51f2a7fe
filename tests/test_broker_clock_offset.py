"""The broker clock's offset: applied when the reading says the clocks differ, not when the
difference is within what a round trip can tell."""

from __future__ import annotations

import time

from asynctask.brokers.clock import BrokerClock


def test_a_clock_ahead_by_more_than_the_round_trip_is_followed() -> None:
    clock = BrokerClock(lambda: time.time() + 90)
    clock.measure()
    assert 89.9 < clock.offset < 90.1
    assert abs(clock.now() - (time.time() + 90)) < 0.1


def test_a_difference_within_the_round_trip_is_none() -> None:
    def slow_reading() -> float:
        time.sleep(0.02)
        return time.time() - 0.005

    clock = BrokerClock(slow_reading)
    clock.measure()
    assert clock.offset == 0.0
