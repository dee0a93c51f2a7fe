"""The watch on Redis's epoch token: a stop waits for the marking of a loss under way, since the
worker closes its tracker and broker right after."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
import redis

from asynctask import Settings
from asynctask.brokers.redis import RedisBroker
from asynctask.worker.lost import LossWatch

MARKING = 0.3


class SlowMarking(LossWatch):
    """Marks a loss in ``MARKING`` seconds, and notes when it is done."""

    marked: list[float]

    def _mark_after_grace(self, noticed: float) -> None:
        time.sleep(MARKING)
        self.marked.append(noticed)


@pytest.fixture
def broker(redis_settings: Settings) -> Iterator[RedisBroker]:
    made = RedisBroker(replace(redis_settings, lost_grace=0.0))
    yield made
    made.close()


def test_stop_returns_once_the_marking_of_a_loss_has_ended(broker: RedisBroker, conn: redis.Redis) -> None:
    watch = SlowMarking(broker, broker.settings, None)
    watch.marked = []
    watch.check()
    # Redis lost its data: the token it held is gone.
    conn.delete(broker.keys.data_epoch)
    watch.check()
    started = time.monotonic()
    watch.stop()
    assert len(watch.marked) == 1
    assert time.monotonic() - started < MARKING + 1


def test_stop_with_no_loss_noticed_returns_at_once(broker: RedisBroker) -> None:
    watch = SlowMarking(broker, broker.settings, None)
    watch.marked = []
    watch.check()
    started = time.monotonic()
    watch.stop()
    assert time.monotonic() - started < 0.1
    assert watch.marked == []
