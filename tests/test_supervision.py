"""A background loop's supervisor: one log line when an outage starts, one when it ends,
whatever the error, pauses that double up to a cap, and a stop that waits for the step under
way."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from asynctask import supervision
from asynctask.supervision import MAX_PAUSE, Activity, Loop, backoff

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


@dataclass(eq=False)
class SlowSteps(Loop):
    """A loop whose step takes a while, as a poll does on a slow broker."""

    thread_name: ClassVar[str] = "slow-steps"
    step: float
    in_step: threading.Event = field(default_factory=threading.Event)
    steps_ended: int = 0

    def run(self) -> None:
        while not self._stopped.is_set():
            self.in_step.set()
            time.sleep(self.step)
            self.steps_ended += 1


def test_stop_returns_once_the_step_under_way_has_ended() -> None:
    loop = SlowSteps(step=0.3)
    loop.start()
    assert loop.in_step.wait(5)
    loop.stop()
    assert not loop.thread.is_alive()
    assert loop.steps_ended == 1


def test_stop_before_start_and_twice_is_harmless() -> None:
    loop = SlowSteps(step=0.0)
    loop.stop()
    loop.stop()
    assert not loop.thread.is_alive()


def test_a_step_that_outlasts_the_wait_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(supervision, "STOP_WAIT", 0.05)
    loop = SlowSteps(step=0.5)
    loop.start()
    assert loop.in_step.wait(5)
    with caplog.at_level(logging.WARNING, logger="asynctask.supervision"):
        loop.stop()
    assert "slow-steps is still in a step" in caplog.text
    loop.thread.join(5)
