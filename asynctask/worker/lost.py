"""A Redis that lost its data, noticed, said once, counted, and its tracked jobs marked ``lost``.

With every heartbeat the worker looks at Redis's epoch token (``brokers.redis.epoch``). The worker
whose look finds another token than the one it saw last, and sets the new one, is the one that
notices: it logs the loss once as an error, counts it (``asynctask_data_losses_total`` on
``/metrics``), and after ``lost_grace`` seconds marks ``lost`` every tracked event still waiting,
running or stopped whose last change came before the loss: its job existed only in Redis, so it
is nowhere now and would never end. The grace lets what workers were doing settle first (a job
that was running goes on to record its end, which then wins over ``lost``: a later transition).

Only a worker that saw the token before can tell: a Redis emptied while no worker ran is not
noticed (a new token is just set), and neither is a loss between a worker's start and its first
heartbeat's look.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

import redis

from asynctask.brokers.redis import RedisBroker
from asynctask.brokers.redis.epoch import count_loss, look
from asynctask.settings import Settings
from asynctask.supervision import Activity, join_stopped
from asynctask.tracking import transitions
from asynctask.tracking.status import EventStatus
from asynctask.tracking.tracker import Tracker

logger = logging.getLogger("asynctask.worker")

#: Events marked per tracking record.
BATCH = 1000


class LossWatch:
    def __init__(self, broker: RedisBroker, settings: Settings, tracker: Tracker | None) -> None:
        self.broker = broker
        self.settings = settings
        self.tracker = tracker
        self._known: str | None = None
        self._stopped = threading.Event()
        #: The threads marking the jobs of a loss lost (one per loss noticed, rarely more).
        self._markers: list[threading.Thread] = []

    def check(self) -> None:
        """One look at the epoch (after a heartbeat); raises the broker's errors."""
        epoch = look(self.broker.redis, self.broker.keys)
        known, self._known = self._known, epoch.token
        if known is None or not epoch.created:
            # The first look, or another worker set the new token (and says it).
            return
        noticed = self.broker.clock.now()
        self._say(noticed)
        marker = threading.Thread(
            target=self._mark_after_grace, args=(noticed,), name="asynctask-lost-jobs", daemon=True
        )
        self._markers = [thread for thread in self._markers if thread.is_alive()] + [marker]
        marker.start()

    def stop(self) -> None:
        """Stop, and wait for a marking under way to end (the worker closes the tracker next)."""
        self._stopped.set()
        for marker in self._markers:
            join_stopped(marker)

    def _say(self, noticed: float) -> None:
        count_loss(self.broker.redis, self.broker.keys)
        logger.error(
            "Redis lost its data (restarted empty, flushed, or failed over to an empty replica): every "
            "job it held is gone; tracked jobs still waiting or running are marked lost in %.0f s",
            self.settings.lost_grace,
            extra={"fields": {"noticed": _shown(noticed), "namespace": self.settings.namespace}},
        )

    def _mark_after_grace(self, noticed: float) -> None:
        if self.tracker is None or self._stopped.wait(self.settings.lost_grace):
            return
        from sqlalchemy.exc import SQLAlchemyError

        activity = Activity("marking lost jobs", logger, (SQLAlchemyError, redis.RedisError))
        while not self._stopped.is_set():
            if activity.attempt(lambda: self._mark(noticed)) is not None:
                return
            self._stopped.wait(activity.pause())

    def _mark(self, noticed: float) -> int:
        """Record ``lost`` for every event left waiting by the loss; return how many."""
        # Loaded here: SQLAlchemy is not otherwise needed by a Redis worker with tracking off.
        from asynctask.tracking.lost import waiting_before

        tracker = self.tracker
        assert tracker is not None
        text = f"lost: Redis lost its data (noticed at {_shown(noticed)}); the job exists nowhere"
        jids = waiting_before(self.settings.database_url, datetime.fromtimestamp(noticed, UTC))
        for start in range(0, len(jids), BATCH):
            chunk = jids[start : start + BATCH]
            tracker.record(*(transitions.status(jid, EventStatus.LOST, text) for jid in chunk))
        if jids:
            fields = {"fields": {"noticed": _shown(noticed)}}
            logger.warning("marked %d tracked job(s) lost", len(jids), extra=fields)
        return len(jids)


def _shown(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")
