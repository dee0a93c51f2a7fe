"""PostgreSQL statements of the apply step: one statement per step, whatever the batch size.

Each step sends its rows as arrays (``unnest``), so the SQL text is the same for every batch:
PostgreSQL and psycopg parse and plan it once per connection, and a batch of a thousand jobs
costs three round trips instead of thousands of row statements. The arrays go in binary
(``%(name)b``), which spares psycopg quoting every text element.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

#: Event columns a transition may change, with their PostgreSQL array types.
UPDATABLE = {
    "status": "text",
    "seq": "bigint",
    "updated_at": "timestamptz",
    "enqueued_at": "timestamptz",
    "started_at": "timestamptz",
    "finished_at": "timestamptz",
    "error": "text",
    "error_class": "text",
    "progress_done": "bigint",
    "progress_total": "bigint",
    "progress_seq": "bigint",
}

LOAD = (
    "SELECT job_id, id, task_id, status, seq, progress_seq, started_at FROM asynctask_event "
    "WHERE job_id = ANY(%(ids)b::text[]) ORDER BY job_id FOR UPDATE"
)

INSERT_MESSAGES = (
    "INSERT INTO asynctask_event_message (event_id, seq, at, status, text) "
    "SELECT * FROM unnest(%(event_id)b::bigint[], %(seq)b::bigint[], %(at)b::timestamptz[], "
    "%(status)b::text[], %(text)b::text[]) "
    "ON CONFLICT (event_id, seq) DO NOTHING RETURNING event_id, seq"
)


def _update_statement() -> str:
    # A column is written only where its "_set" flag is true, so one statement serves rows
    # that change different columns (and can set a column to NULL on purpose).
    assignments = [f"{c} = CASE WHEN v.{c}_set THEN v.{c} ELSE e.{c} END" for c in UPDATABLE]
    arrays = ["%(id)b::bigint[]", "%(starts)b::int[]"]
    names = ["id", "starts"]
    for column, kind in UPDATABLE.items():
        arrays += (f"%({column})b::{kind}[]", f"%({column}_set)b::bool[]")
        names += (column, f"{column}_set")
    return (
        f"UPDATE asynctask_event AS e SET {', '.join(assignments)}, attempt = e.attempt + v.starts "
        f"FROM unnest({', '.join(arrays)}) AS v({', '.join(names)}) WHERE e.id = v.id"
    )


UPDATE_EVENTS = _update_statement()


def load(connection: Connection, job_ids: Sequence[str]) -> list[Any]:
    return list(connection.exec_driver_sql(LOAD, {"ids": list(job_ids)}))


def insert_messages(connection: Connection, messages: list[dict[str, Any]]) -> dict[int, int]:
    """Insert the messages not stored yet; return how many starts each event gained."""
    if not messages:
        return {}
    columns: dict[str, list[Any]] = {name: [] for name in ("event_id", "seq", "at", "status", "text")}
    start_keys = set()
    for message in messages:
        for name, values in columns.items():
            values.append(message[name])
        if message["starts"]:
            start_keys.add((message["event_id"], message["seq"]))
    starts: dict[int, int] = defaultdict(int)
    for event_id, seq in connection.exec_driver_sql(INSERT_MESSAGES, columns):
        if (event_id, seq) in start_keys:
            starts[event_id] += 1
    return starts


def update_events(connection: Connection, changes: dict[int, dict[str, Any]], starts: dict[int, int]) -> None:
    ids = sorted(changes.keys() | starts.keys())
    if not ids:
        return
    params: dict[str, list[Any]] = {"id": ids, "starts": [starts.get(i, 0) for i in ids]}
    for column in UPDATABLE:
        params[column] = [changes.get(i, {}).get(column) for i in ids]
        params[f"{column}_set"] = [column in changes.get(i, {}) for i in ids]
    connection.exec_driver_sql(UPDATE_EVENTS, params)
