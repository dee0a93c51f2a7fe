"""SQLite statements of the apply step, as plain SQL handed to the driver.

A worker applies a batch for every job it settles, usually a job's two or three
transitions: building, compiling and binding SQLAlchemy statements for so few rows cost more
CPU than SQLite spends running them. The texts here depend only on the shape of a batch, so
sqlite3's statement cache keeps them prepared.

Times are written in the text SQLAlchemy's ``DateTime`` writes on SQLite (the other writers
and every reader of these columns go through it), and read back from it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

#: Event columns holding times.
TIMES = frozenset({"updated_at", "enqueued_at", "started_at", "finished_at"})

LOAD = (
    "SELECT job_id, id, task_id, status, seq, progress_seq, started_at FROM asynctask_event "
    "WHERE job_id IN (SELECT value FROM json_each(?))"
)

#: Rows per INSERT: 5 parameters each, well under SQLite's bound-parameter limit (32766).
INSERT_CHUNK = 1000


def to_text(at: datetime | None) -> str | None:
    """``at`` (UTC) as SQLAlchemy's ``DateTime`` stores it on SQLite."""
    # isoformat is C; strftime would cost more than the statement it binds for.
    return None if at is None else at.replace(tzinfo=None).isoformat(" ", "microseconds")


def load(
    connection: Connection, job_ids: Sequence[str]
) -> list[tuple[str, int, str | None, str, int, int, datetime | None]]:
    ids = json.dumps(list(job_ids))
    return [
        (
            job_id,
            id_,
            task_id,
            status,
            seq,
            progress_seq,
            None if started is None else datetime.fromisoformat(started),
        )
        for job_id, id_, task_id, status, seq, progress_seq, started in connection.exec_driver_sql(
            LOAD, (ids,)
        )
    ]


def insert_messages(connection: Connection, messages: list[dict[str, Any]]) -> dict[int, int]:
    """Insert the messages not stored yet; return how many starts each event gained."""
    starts: dict[int, int] = defaultdict(int)
    start_keys = {(m["event_id"], m["seq"]) for m in messages if m["starts"]}
    for first in range(0, len(messages), INSERT_CHUNK):
        chunk = messages[first : first + INSERT_CHUNK]
        statement = (
            "INSERT INTO asynctask_event_message (event_id, seq, at, status, text) VALUES "
            + ", ".join(["(?, ?, ?, ?, ?)"] * len(chunk))
            + " ON CONFLICT (event_id, seq) DO NOTHING RETURNING event_id, seq"
        )
        params: list[Any] = []
        for m in chunk:
            params += (m["event_id"], m["seq"], to_text(m["at"]), m["status"], m["text"])
        for event_id, seq in connection.exec_driver_sql(statement, tuple(params)):
            if (event_id, seq) in start_keys:
                starts[event_id] += 1
    return starts


def update_events(connection: Connection, changes: dict[int, dict[str, Any]], starts: dict[int, int]) -> None:
    """One executemany per set of changed columns (most batches have two or three shapes).

    An event's attempt grows by the starts counted from the messages actually inserted, so
    replays and batches applied out of order count each start once.
    """
    by_shape: dict[tuple[str, ...], list[tuple[Any, ...]]] = defaultdict(list)
    for event_id in sorted(changes.keys() | starts.keys()):
        changed = changes.get(event_id, {})
        shape = tuple(sorted(changed))
        values = [to_text(changed[c]) if c in TIMES else changed[c] for c in shape]
        by_shape[shape].append((*values, starts.get(event_id, 0), event_id))
    for shape, rows in by_shape.items():
        # The column names are _step's own keys, never input.
        assignments = "".join(f"{column} = ?, " for column in shape)
        statement = f"UPDATE asynctask_event SET {assignments}attempt = attempt + ? WHERE id = ?"
        connection.exec_driver_sql(statement, rows)
