"""A background loop's supervisor: one log line when an outage starts, one when it ends,
whatever the error, and pauses that double up to a cap."""

from __future__ import annotations

import logging

import pytest

from asynctask.supervision import MAX_PAUSE, Activity, backoff

logger = logging.getLogger("asynctask.test-supervision")


class Outage(Exception):
    pass


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    activity = Activity("poll", logger, expected=(Outage,))
    with caplog.at_level(logging.INFO, logger=logger.name):
        for _ in range(50):
            assert activity.attempt(lambda: (_ for _ in ()).throw(Outage("down"))) is None
        assert activity.attempt(lambda: 7) == 7
        assert activity.attempt(lambda: 8) == 8
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert messages == [("ERROR", "poll failed: down; retrying"), ("WARNING", "poll recovered")]
    assert caplog.records[0].exc_info is None
    assert caplog.records[1].fields["failed_attempts"] == 50  # type: ignore[attr-defined]


def test_an_unexpected_error_is_logged_with_its_traceback_and_never_escapes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    activity = Activity("beat", logger, expected=(Outage,))

    def bug() -> None:
        raise KeyError("bug")

    with caplog.at_level(logging.ERROR, logger=logger.name):
        assert activity.attempt(bug) is None
        assert activity.attempt(lambda: (_ for _ in ()).throw(SystemExit(3))) is None
    assert caplog.records[0].exc_info is not None
    assert activity.failures == 2


def test_pauses_double_from_the_first_and_stop_at_the_cap() -> None:
    assert [backoff(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.8]
    assert backoff(60) == MAX_PAUSE
    assert backoff(60, max_pause=0.5) == 0.5
    activity = Activity("x", logger)
    activity.attempt(lambda: 1 / 0)
    activity.attempt(lambda: 1 / 0)
    assert activity.pause() == 0.2
