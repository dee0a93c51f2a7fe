"""The ``enqueue`` events a new task's jobs start with, written batch by batch inside the
task's SQL transaction (see ``tasks.creation.create_task``).

PostgreSQL: one COPY per batch, several times faster than INSERTs, and left open while the
caller prepares the next batch, so that the server stores one batch's rows while this
process builds the next. SQLite: one executemany of plain tuples per batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection, select

from asynctask import payload
from asynctask.flow.options import FIELDS as FLOW_FIELDS
from asynctask.tracking import apply_sqlite
from asynctask.tracking.models import Event, EventMessage
from asynctask.tracking.status import EventStatus

#: ``json.dumps``'s spelling, with the encoder built once (``json.dumps`` builds it per call):
#: SQLAlchemy's JSON type writes SQLite's columns so, and PostgreSQL's are given raw UTF-8.
_as_sqlalchemy_json = payload.c_encoder(allow_nan=True, compact=False, ensure_ascii=True)
_as_json_text = payload.c_encoder(allow_nan=True, compact=False)

EVENT_COLUMNS = (
    "job_id",
    "task_id",
    "job_name",
    "status",
    "params",
    "flow",
    "attempt",
    "seq",
    "progress_seq",
    "enqueued_at",
    "updated_at",
)


class EventRows(Protocol):
    def write(self, jobs: list[payload.JobDict]) -> None:
        """Send the ``enqueue`` events of a batch of jobs (stored by ``settle`` at the latest)."""

    def settle(self) -> None:
        """Wait until every written row is stored: before anything else uses the connection."""


@contextmanager
def event_rows(
    connection: Connection, task_id: str, name: str, at: datetime, flowing: bool
) -> Iterator[EventRows]:
    """An ``EventRows`` on ``connection``, valid inside the block; leaving it settles."""
    # psycopg's COPY is a coroutine in its async mode, which SQLAlchemy's adapter does not
    # expose: an asyncio engine inserts its rows.
    if connection.dialect.name != "postgresql" or connection.dialect.is_async:
        yield _InsertedRows(connection, task_id, name, at, flowing)
        return
    with ExitStack() as open_copy:
        rows = _CopiedRows(connection, task_id, name, at, flowing, open_copy)
        yield rows
        rows.settle()


class _InsertedRows:
    def __init__(self, connection: Connection, task_id: str, name: str, at: datetime, flowing: bool) -> None:
        self.connection = connection
        self.flowing = flowing
        self.fixed = (task_id, name, EventStatus.ENQUEUE.value)
        stamp = _stamp(connection, at)
        self.stamps = (stamp, stamp)
        # Without flow keys the column is left out: its NULL costs nothing per row, a JSON null does.
        columns = EVENT_COLUMNS if flowing else tuple(column for column in EVENT_COLUMNS if column != "flow")
        mark = _placeholder(connection)
        values = ", ".join(
            "0" if column in ("attempt", "seq", "progress_seq") else mark for column in columns
        )
        self.statement = f"INSERT INTO {Event.__tablename__} ({', '.join(columns)}) VALUES ({values})"

    def write(self, jobs: list[payload.JobDict]) -> None:
        # Plain tuples through the driver: SQLAlchemy's per-row parameter processing would cost
        # as much as the rows themselves. The JSON is spelled as SQLAlchemy's JSON type does it.
        fixed, stamps, spelled = self.fixed, self.stamps, _as_sqlalchemy_json
        rows: list[tuple[Any, ...]]
        if self.flowing:
            rows = [(item["jid"], *fixed, spelled(item["args"]), _flow_json(item), *stamps) for item in jobs]
        else:
            rows = [(item["jid"], *fixed, spelled(item["args"]), *stamps) for item in jobs]
        self.connection.exec_driver_sql(self.statement, rows)

    def settle(self) -> None:
        """Each ``write`` stored its rows before it returned."""


class _CopiedRows:
    def __init__(
        self,
        connection: Connection,
        task_id: str,
        name: str,
        at: datetime,
        flowing: bool,
        open_copy: ExitStack,
    ) -> None:
        self.cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        self.flowing = flowing
        self.open_copy = open_copy
        # Ids, status, numbers and the timestamp never need escaping; the name and params may.
        self.head = f"\t{task_id}\t{_copy_text(name)}\t{EventStatus.ENQUEUE.value}\t"
        stamp = at.isoformat()
        self.tail = f"\t0\t0\t0\t{stamp}\t{stamp}\n"
        self.statement = f"COPY {Event.__tablename__} ({', '.join(EVENT_COLUMNS)}) FROM STDIN"

    def write(self, jobs: list[payload.JobDict]) -> None:
        self.settle()
        copy = self.open_copy.enter_context(self.cursor.copy(self.statement))
        head, tail, flowing, spelled = self.head, self.tail, self.flowing, _as_json_text
        copy.write(
            "".join(
                item["jid"]
                + head
                + _copy_text(spelled(item["args"]))
                + (_copied_flow(item) if flowing else "\t\\N")
                + tail
                for item in jobs
            )
        )

    def settle(self) -> None:
        # Ends the COPY: the server confirms the rows, or raises what it refused.
        self.open_copy.close()


def write_waiting(
    connection: Connection, jobs: list[payload.JobDict], prefix: str, at: datetime, held: str | None = None
) -> None:
    """The first message of each keyed job's event: the key whose line it may wait in (as its
    tenant wrote it), after what holds the task (``held``, said of every job). Sequence 0
    comes before any transition the stream numbers (from 1).

    Per batch: one SELECT of the events' ids, then one COPY (PostgreSQL) or one executemany of
    plain tuples (SQLite): these rows cost as much as the events themselves otherwise."""
    keys = {
        item["jid"]: shown_key(item["concurrency_key"], prefix)
        for item in jobs
        if isinstance(item.get("concurrency_key"), str)
    }
    texts = {jid: f"waiting for {key}" for jid, key in keys.items()}
    if held is not None:
        texts = {
            item["jid"]: held if item["jid"] not in keys else f"{held}, then for {keys[item['jid']]}"
            for item in jobs
        }
    if not texts:
        return
    ids = connection.execute(select(Event.job_id, Event.id).where(Event.job_id.in_(list(texts)))).all()
    status = EventStatus.ENQUEUE.value
    columns = "event_id, seq, at, status, text"
    if connection.dialect.name == "postgresql" and not connection.dialect.is_async:
        cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        stamp = at.isoformat()
        with cursor.copy(f"COPY {EventMessage.__tablename__} ({columns}) FROM STDIN") as copy:
            head = f"\t0\t{stamp}\t{status}\t"
            copy.write("".join(f"{id_}{head}{_copy_text(texts[jid])}\n" for jid, id_ in ids))
        return
    stored_at = _stamp(connection, at)
    mark = _placeholder(connection)
    connection.exec_driver_sql(
        f"INSERT INTO {EventMessage.__tablename__} ({columns}) VALUES ({mark}, 0, {mark}, {mark}, {mark})",
        [(id_, stored_at, status, texts[jid]) for jid, id_ in ids],
    )


def _placeholder(connection: Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"


def _stamp(connection: Connection, at: datetime) -> datetime | str | None:
    """A time as the driver takes it for a timestamp column: SQLite's text, or the datetime."""
    return apply_sqlite.to_text(at) if connection.dialect.name == "sqlite" else at


def shown_key(key: str, prefix: str) -> str:
    """A concurrency key as its tenant wrote it (without the tenant's prefix)."""
    return key[len(prefix) :] if key.startswith(prefix) else key


def _flow_of(item: payload.JobDict) -> dict[str, Any] | None:
    """The job's flow-control payload keys, or None (most jobs: one lookup per key)."""
    flow = {name: item[name] for name in FLOW_FIELDS if name in item}
    return flow or None


def _flow_json(item: payload.JobDict) -> str | None:
    flow = _flow_of(item)
    return None if flow is None else _as_sqlalchemy_json(flow)


def _copied_flow(item: payload.JobDict) -> str:
    """The ``flow`` field of a COPY row, with its leading tab: ``\\N`` (NULL) or the JSON."""
    flow = _flow_of(item)
    return "\t\\N" if flow is None else "\t" + _copy_text(_as_json_text(flow))


def _copy_text(value: str) -> str:
    """Escape a value for COPY's text format (backslash, and the tab/newline separators)."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value
