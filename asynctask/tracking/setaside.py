"""Reading the transitions set aside (``tracking.isolate``): how many, and the latest ones."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, func, select

from asynctask.db.engine import as_utc
from asynctask.tracking.models import SetAside

#: Bytes of a set-aside transition shown (its full bytes stay in the table).
SHOWN_BYTES = 2000


@dataclass(frozen=True, slots=True)
class SetAsideView:
    id: int
    at: datetime
    job_id: str | None
    error: str
    #: The transition's bytes as text (undecodable bytes replaced), cut at ``SHOWN_BYTES``.
    data: str
    size: int


def count(connection: Connection) -> int:
    return int(connection.execute(select(func.count()).select_from(SetAside)).scalar_one())


def latest(connection: Connection, limit: int) -> list[SetAsideView]:
    rows = connection.execute(
        select(
            SetAside.id,
            SetAside.at,
            SetAside.job_id,
            SetAside.error,
            func.substr(SetAside.data, 1, SHOWN_BYTES).label("head"),
            func.length(SetAside.data).label("size"),
        )
        .order_by(SetAside.id.desc())
        .limit(limit)
    )
    return [
        SetAsideView(
            id=row.id,
            at=as_utc(row.at) or row.at,
            job_id=row.job_id,
            error=row.error,
            data=bytes(row.head).decode(errors="replace"),
            size=int(row.size),
        )
        for row in rows
    ]
