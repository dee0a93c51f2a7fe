"""Poller: moves due jobs from ``retry`` and ``schedule`` to their queues.

Each due member is rewritten (fresh ``enqueued_at``, client middleware run again, as
Sidekiq re-pushes it through its client) and moved by a script that removes and pushes it
together, so a crash never loses one and two pollers never both enqueue it.

Sleep between passes, as Sidekiq: the cluster polls on average every
``scheduled_poll_interval`` seconds, so each process waits ``processes * interval`` on
average, uniformly in [0.5, 1.5) of that below 10 processes, [0, 1) of it above.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import ClassVar

from asynctask import payload
from asynctask.brokers import DueJobs
from asynctask.errors import PayloadError
from asynctask.middleware import Chain
from asynctask.supervision import Activity, Loop
from asynctask.worker.retry import describe

logger = logging.getLogger("asynctask.scheduled")


@dataclass(eq=False)
class Poller(Loop):
    thread_name: ClassVar[str] = "asynctask-poller"
    broker: DueJobs
    client_chain: Chain[payload.JobDict]
    interval: float

    def run(self) -> None:
        # A random first wait spreads the polls of processes that were started together.
        if self._stopped.wait(random.random() * self.interval):
            return
        activity = Activity("scheduled poll", logger, self.broker.errors)
        while not self._stopped.is_set():
            pause = activity.attempt(self._poll)
            self._stopped.wait(activity.pause() if pause is None else pause)

    def _poll(self) -> float:
        """One pass; returns the seconds to wait before the next one."""
        self.enqueue()
        return self.random_poll_interval()

    def enqueue(self) -> int:
        """One pass over ``retry`` then ``schedule``; returns how many jobs were moved."""
        return self.broker.enqueue_due("retry", self._rewrite) + self.broker.enqueue_due(
            "schedule", self._rewrite
        )

    def random_poll_interval(self) -> float:
        count = max(1, self.broker.process_count())
        average = count * self.interval
        return average * random.random() + average / 2 if count < 10 else average * random.random()

    def _rewrite(self, member: bytes) -> payload.JobDict | None:
        """The job to enqueue for a due member, or None: refused by the client middleware, or
        buried byte for byte because it is not a valid job or the middleware raised on it
        (left in place, it would fail every pass and hold up the jobs due after it)."""
        try:
            job = payload.loads(member)
        except PayloadError as exc:
            self._bury(member, str(exc), exc.job)
            return None
        # Sidekiq's client puts a job without a queue in "default".
        queue = job.setdefault("queue", "default")
        try:
            return self.client_chain.invoke(job, queue, final=lambda: job)
        except self.broker.errors:
            raise
        except Exception as exc:
            self._bury(member, f"the client middleware raised {describe(exc)} on it", job)
            return None

    def _bury(self, member: bytes, reason: str, job: payload.JobDict | None) -> None:
        logger.error("burying a scheduled entry: %s", reason)
        jid = payload.valid_jid(job.get("jid")) if job is not None else None
        self.broker.kill_unparseable(None, member, "default", reason, jid)
