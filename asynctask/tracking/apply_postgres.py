"""PostgreSQL statements of the apply step: one statement per step (the events' update, one per
shape of change), whatever the batch size.

Each step sends its rows as arrays (``unnest``), so the SQL text does not depend on the batch's
size: PostgreSQL and psycopg parse and plan it once per connection, and a batch of a thousand
jobs costs a few round trips instead of thousands of row statements. Arrays of texts and times
go in binary (``%(name)b``), which spares psycopg quoting every text element; arrays of
integers that hold no NULL go as one array text each (``_integers``), cheaper still.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import cache
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

#: Integer columns a transition never sets to NULL, sent as array text (``_integers``).
NEVER_NULL = frozenset({"seq", "progress_seq"})

INSERT_MESSAGES = (
    "INSERT INTO asynctask_event_message (event_id, seq, at, status, text) "
    "SELECT * FROM unnest(%(event_id)s::bigint[], %(seq)s::bigint[], %(at)b::timestamptz[], "
    "%(status)b::text[], %(text)b::text[]) "
    "ON CONFLICT (event_id, seq) DO NOTHING RETURNING event_id, seq"
)


def _integers(values: Iterable[int]) -> str:
    """``values`` as an array's text, which PostgreSQL parses: joined in C, where psycopg writes
    a binary array element by element in Python, a third of a batch's dumping."""
    return "{" + ",".join(map(str, values)) + "}"


@cache
def _update_statement(columns: tuple[str, ...]) -> str:
    """The update of the events that change exactly ``columns`` (in ``UPDATABLE`` order): a
    batch's events mostly change the same few (a start and an end: 8 of the 11), so each shape
    sends only its own arrays."""
    arrays = [
        "%(id)s::bigint[]",
        "%(starts)s::int[]",
        *(f"%({c})s::bigint[]" if c in NEVER_NULL else f"%({c})b::{UPDATABLE[c]}[]" for c in columns),
    ]
    assignments = ", ".join([*(f"{c} = v.{c}" for c in columns), "attempt = e.attempt + v.starts"])
    return (
        f"UPDATE asynctask_event AS e SET {assignments} "
        f"FROM unnest({', '.join(arrays)}) AS v({', '.join(['id', 'starts', *columns])}) WHERE e.id = v.id"
    )


def load(connection: Connection, job_ids: Sequence[str]) -> Sequence[Any]:
    return connection.exec_driver_sql(LOAD, {"ids": list(job_ids)}).all()


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
    params: dict[str, Any] = {
        **columns,
        "event_id": _integers(columns["event_id"]),
        "seq": _integers(columns["seq"]),
    }
    starts: dict[int, int] = defaultdict(int)
    for event_id, seq in connection.exec_driver_sql(INSERT_MESSAGES, params).all():
        if (event_id, seq) in start_keys:
            starts[event_id] += 1
    return starts


def update_events(connection: Connection, changes: dict[int, dict[str, Any]], starts: dict[int, int]) -> None:
    """One statement per shape of change (the columns an event's transitions set, which may set
    one to NULL on purpose); the rows are locked already, by ``LOAD``, in job id order."""
    shapes: dict[tuple[str, ...], list[int]] = defaultdict(list)
    for event_id in sorted(changes.keys() | starts.keys()):
        changed = changes.get(event_id, {})
        shapes[tuple(column for column in UPDATABLE if column in changed)].append(event_id)
    for columns, ids in shapes.items():
        params: dict[str, Any] = {"id": _integers(ids), "starts": _integers(starts.get(i, 0) for i in ids)}
        for column in columns:
            values = [changes[i][column] for i in ids]
            params[column] = _integers(values) if column in NEVER_NULL else values
        connection.exec_driver_sql(_update_statement(columns), params)
