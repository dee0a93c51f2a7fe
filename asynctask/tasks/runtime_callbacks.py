"""Sending the due callbacks whose job another runtime runs (a Celery task as ``on_complete``).

The transaction that ends a task makes such a callback due as any other; AsyncTask's brokers
leave it alone, since only a process that has the runtime's job can send it: the process that
cancelled the task, or created it already cancelled, right after its commit, and every process
that applies tracking for that runtime (``integrations.attached``), on each look. A sender takes
the callback (marks it pushed) and sends it in one transaction: two senders never both send one,
and one that dies before its commit leaves it due, to be sent again. Another runtime cannot join
that transaction, so a sender killed between the send and the commit sends it twice: delivery is
at least once, as for any job of that runtime. The job is sent untracked, with the task's summary
first among its args and its jid as the runtime's job id.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy import Engine

from asynctask import payload
from asynctask.db.engine import create_database_engine, writer
from asynctask.registry import Registry
from asynctask.settings import Settings
from asynctask.tasks.runtime import OutgoingJob, RuntimeJob
from asynctask.tracking import callbacks

logger = logging.getLogger("asynctask.tracking")


def send_due(engine: Engine, registry: Registry, ids: Sequence[int] | None = None) -> int:
    """Send the due callbacks (those of ``ids``, or any) whose job is another runtime's job
    ``registry`` knows; return how many were sent."""
    jobs = {job.name: job for job in registry if isinstance(job, RuntimeJob)}
    if not jobs:
        return 0
    sent = 0
    while True:
        # One at a time: a send that fails rolls back its own callback only.
        try:
            with writer(engine).begin() as connection:
                taken = callbacks.take(connection, ids, limit=1, elsewhere=sorted(jobs))
                if not taken:
                    return sent
                callback = taken[0]
                job = payload.loads(callback.payload)
                try:
                    jobs[str(job["class"])].sender.send([OutgoingJob(callback.jid, None, list(job["args"]))])
                except Exception as exc:
                    raise _NotSent(exc) from exc
        except _NotSent as failure:
            # Whatever the runtime's client raised: the callback stays due for the next look.
            logger.warning(
                "task %s: callback job %s left for the next look: %s",
                callback.task_id,
                callback.jid,
                failure.__cause__,
            )
            return sent
        logger.info("task %s: sent its callback job %s", callback.task_id, callback.jid)
        sent += 1


class _NotSent(Exception):
    """The runtime's client refused a callback (its ``__cause__``): its transaction rolls back."""


class RuntimeCallbacks:
    """``send_due`` for a process of another runtime, with the tracking database's engine made
    at the first look that has a job to send for: a process whose registry holds none never
    opens it."""

    def __init__(self, settings: Settings, registry: Registry) -> None:
        self.settings = settings
        self.registry = registry
        self._engine: Engine | None = None

    def send_due(self) -> int:
        if not any(isinstance(job, RuntimeJob) for job in self.registry):
            return 0
        if self._engine is None:
            self._engine = create_database_engine(self.settings.database_url)
        return send_due(self._engine, self.registry)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
