"""The tracked jobs a broker that lost its data took with it: events whose job had not ended when
the loss was noticed, and that nothing changed since (``worker.lost`` marks them ``lost``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from asynctask.db.engine import create_database_engine
from asynctask.tracking.models import Event
from asynctask.tracking.status import TERMINAL, EventStatus

#: Every status but those of jobs that ended: waiting, running, stopped.
_NOT_ENDED = [status.value for status in EventStatus if status not in TERMINAL]


def waiting_before(database_url: str, before: datetime) -> list[str]:
    """The jids of events not ended whose last change came before ``before``."""
    engine = create_database_engine(database_url)
    try:
        with engine.connect() as connection:
            return list(
                connection.scalars(
                    select(Event.job_id)
                    .where(Event.status.in_(_NOT_ENDED), Event.updated_at < before)
                    .order_by(Event.id)
                )
            )
    finally:
        engine.dispose()
