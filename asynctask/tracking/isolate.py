"""A batch of transitions that the database refused for its data: applied without what it refused.

Texts are made storable where transitions are made (``Transition.encode``), so a refusal means
something no check foresaw: an entry written by an older or foreign writer, a job id longer
than its column, a database whose encoding holds less than UTF-8. Retrying such a batch would
fail for ever and stop every later transition behind it. So the batch is applied again in
halves, each under a savepoint, down to the transitions refused alone; those are set aside
(``SetAside``, with their bytes and the database's reason, in the same transaction) and the
rest is applied. Connection errors are not data errors: they reach the caller, which retries.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Connection, insert
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, SQLAlchemyError, StatementError

from asynctask import storable
from asynctask.tracking.apply import Applied, apply_transitions, combined
from asynctask.tracking.models import SetAside
from asynctask.tracking.transitions import Transition

logger = logging.getLogger("asynctask.tracking")

#: Transitions refused alone, with the database's reason.
Refused = list[tuple[Transition, str]]

#: Bytes of a refused job id kept in the set-aside row's ``job_id`` (its bytes are whole in ``data``).
JOB_ID_SHOWN = 200


class BatchRefused(SQLAlchemyError):
    """The database refused a batch for its data; the transaction that carried it is lost. Its
    writer retries as after any database error, and the retry sets aside what is refused."""


def is_data_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the database (or its driver) refusing the values, not failing to run."""
    if isinstance(exc, DBAPIError):
        return isinstance(exc, DataError | IntegrityError)
    return isinstance(exc, StatementError | UnicodeError | ValueError | OverflowError)


def apply_isolating(connection: Connection, batch: Sequence[Transition]) -> Applied:
    """Apply ``batch`` inside the caller's transaction, setting aside each transition the
    database refuses for its data; return what the rest changed."""
    refused: Refused = []
    applied: list[Applied] = []
    _apply_part(connection, list(batch), refused, applied)
    set_aside(
        connection,
        [(t.jid, t.dumps().encode("utf-8", "surrogatepass"), reason) for t, reason in refused],
    )
    return combined(applied)


def set_aside(connection: Connection, rows: Sequence[tuple[str | None, bytes, str]]) -> None:
    """Keep ``rows`` (job id if known, bytes, reason) in ``SetAside``, in the caller's transaction."""
    if not rows:
        return
    now = datetime.now(UTC)
    connection.execute(
        insert(SetAside),
        [
            {
                "at": now,
                "job_id": None if jid is None else storable.bounded(storable.escaped(jid), JOB_ID_SHOWN),
                "data": data,
                "error": storable.storable(reason, storable.DEFAULT_TEXT_LIMIT),
            }
            for jid, data, reason in rows
        ],
    )
    for jid, _, reason in rows:
        logger.error(
            "set aside a tracking transition: %s",
            reason,
            extra={"fields": {"jid": None if jid is None else storable.escaped(jid[:JOB_ID_SHOWN])}},
        )


def _apply_part(
    connection: Connection, part: list[Transition], refused: Refused, applied: list[Applied]
) -> None:
    savepoint = connection.begin_nested()
    try:
        done = apply_transitions(connection, part)
    except Exception as exc:
        savepoint.rollback()
        if not is_data_error(exc):
            raise
        if len(part) == 1:
            refused.append((part[0], f"refused by the database: {first_line(exc)}"))
            return
        middle = len(part) // 2
        _apply_part(connection, part[:middle], refused, applied)
        _apply_part(connection, part[middle:], refused, applied)
    else:
        savepoint.commit()
        applied.append(done)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
