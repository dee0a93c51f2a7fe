"""Staging a task whose jobs another runtime runs: its jobs are held until ``create_task``
committed the task and every ``enqueue`` event, then sent through the runtime's ``Sender`` in
batches; the events of jobs that could not be sent end ``error`` "not sent: <reason>"."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine

from asynctask import payload
from asynctask.brokers import Staging
from asynctask.db.engine import writer
from asynctask.errors import JobsNotSent
from asynctask.tasks.runtime import SEND_BATCH, OutgoingJob, PartlySent, RuntimeJob
from asynctask.tracking.apply import apply_transitions
from asynctask.tracking.status import EventStatus
from asynctask.tracking.transitions import Transition

logger = logging.getLogger("asynctask.tracking")


class RuntimeStaging(Staging):
    """A task's jobs, kept until the task is committed, then sent through the runtime."""

    def __init__(self, job: RuntimeJob, engine: Engine, task_id: str) -> None:
        self.job = job
        self.engine = engine
        self.task_id = task_id
        self._pending: list[OutgoingJob] = []

    def encode(self, jobs: Sequence[payload.JobDict]) -> list[OutgoingJob]:
        return [OutgoingJob(item["jid"], self.task_id, list(item["args"])) for item in jobs]

    def write(self, encoded: Any, connection: Connection) -> None:
        self._pending.extend(encoded)

    def publish(self) -> int:
        pending, self._pending = self._pending, []
        for start in range(0, len(pending), SEND_BATCH):
            batch = pending[start : start + SEND_BATCH]
            try:
                self.job.sender.send(batch)
            except PartlySent as exc:
                self._not_sent(pending, start + exc.sent, exc.cause)
            except Exception as exc:
                self._not_sent(pending, start, exc)
        return len(pending)

    def _not_sent(self, jobs: list[OutgoingJob], sent: int, cause: BaseException) -> None:
        reason = str(cause) or type(cause).__name__
        unsent = [job.jid for job in jobs[sent:]]
        logger.error(
            "task %s: %d job(s) not sent to %s: %s", self.task_id, len(unsent), self.job.runtime, reason
        )
        mark_not_sent(self.engine, unsent, reason)
        raise JobsNotSent(self.task_id, sent, len(jobs), reason) from cause

    def discard(self) -> None:
        self._pending = []


def mark_not_sent(engine: Engine, jids: Sequence[str], reason: str) -> None:
    """End the events of jobs that never reached their runtime: ``error`` "not sent: <reason>".

    Numbered 1, after the ``enqueue`` they were created with (0): nothing else is ever
    recorded for a job that was not sent.
    """
    at = datetime.now(UTC).timestamp()
    for start in range(0, len(jids), SEND_BATCH):
        batch = [
            Transition(jid, EventStatus.ERROR.value, at, f"not sent: {reason}", seq=1)
            for jid in jids[start : start + SEND_BATCH]
        ]
        with writer(engine).begin() as connection:
            apply_transitions(connection, batch)
