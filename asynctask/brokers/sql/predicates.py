"""What every family of the SQL broker's statements shares: the predicates the partial indexes
of ``models`` are defined by, spelled as literals (SQLite and PostgreSQL use a partial index only
when they can see that a query implies its predicate, which a bound parameter hides), the
columns a job is written with, and the dialect's spelling of "now" and of a list of ids.

Times a process's liveness is judged by (``expires_at``) come from PostgreSQL's clock there,
so that hosts with skewed clocks agree on who is dead, as Redis's TTLs make them agree;
SQLite is one file on one host, whose clock the ``:now`` parameter carries.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

#: The channel NOTIFY announces new jobs on; the payload is the queue's name.
CHANNEL = "asynctask_jobs"

#: Claimable rows: the predicate of the index ``ix_asynctask_job_fetch``.
CLAIMABLE = "state = 'queued' AND locked_by IS NULL"
#: A fair queue's claimable rows of tasks, and those outside any task: the predicates of the
#: indexes ``ix_asynctask_job_turn`` and ``ix_asynctask_job_plain``.
TAGGED = f"{CLAIMABLE} AND turn IS NOT NULL"
PLAIN = f"{CLAIMABLE} AND turn IS NULL"
#: Rows of this process, among rows found by id. Spelled so that no index can serve it: the
#: index of claimed rows keeps an entry for every row the process claimed until a vacuum (a
#: bitmap scan never marks one dead), and PostgreSQL, intersecting it with the ids, would read
#: them all at every acknowledgement.
MINE = "(locked_by = :me) IS TRUE"
#: The order of each kind's index: a LIMIT read in it is a read of the index's head.
TAGGED_ORDER = "priority, turn, id"
PLAIN_ORDER = "priority, id"
#: The queue ``{}`` (a name or a parameter) is not paused: one primary-key probe.
NOT_PAUSED = "NOT EXISTS (SELECT 1 FROM asynctask_paused_queue WHERE asynctask_paused_queue.queue = {})"

#: The job sets (scheduled, retry, dead): the predicate of the index ``ix_asynctask_job_set``.
IN_A_SET = "state <> 'queued'"

#: The cancellation generation: it changes whenever a task is cancelled (cancellations are
#: never removed, and a new one adds a row).
GENERATION = "SELECT count(*) || ':' || coalesce(max(at), 0) FROM asynctask_cancelled_task"

JOB_COLUMNS = ("jid", "queue", "state", "priority", "run_at", "payload", "last_error", "lane", "holds")

#: Whether each queue of a claim, in the order tried, is served fairly.
Fairness: TypeAlias = tuple[bool, ...]
#: Which of a fair queue's claimable rows a PostgreSQL claim reads: both kinds (a task's
#: tagged rows and the plain rows outside tasks), or one kind only, when the claim before
#: saw none of the other waiting: a queue of tasks alone, or of plain jobs alone, is then
#: claimed by one LIMIT read, as a FIFO queue is (``_kinds_waiting``).
Mix: TypeAlias = Literal["both", "tagged", "plain"]
#: The bits of the kinds a claim saw waiting, in its generation row (``_kinds_waiting``).
TAGGED_WAITING, PLAIN_WAITING = 1, 2

#: SQLite: a job's payload as the bytes stored. SQLite keeps whatever it is given, a BLOB or
#: text that is not UTF-8 (which the driver cannot read as a string), if something other than
#: AsyncTask wrote the row; read as bytes, such a payload is buried like any other that is
#: not a job, instead of failing every claim. PostgreSQL only stores valid UTF-8 text.
STORED_PAYLOAD = "CAST(payload AS BLOB)"


def now_of(pg: bool) -> str:
    """ "Now" as liveness is judged: PostgreSQL's clock, or SQLite's ``:now`` parameter."""
    return "CAST(EXTRACT(EPOCH FROM clock_timestamp()) AS DOUBLE PRECISION)" if pg else ":now"


def ids_of(pg: bool) -> str:
    """The rows whose ids the ``:ids`` parameter lists (see ``ids_value``)."""
    return "id = ANY(CAST(:ids AS BIGINT[]))" if pg else "id IN (SELECT value FROM json_each(:ids))"


def ids_value(values: Sequence[int | str], pg: bool) -> Any:
    """The ``:ids`` parameter: an array on PostgreSQL, JSON text for SQLite's json_each."""
    numbers = [int(v) for v in values]
    return numbers if pg else json.dumps(numbers)


def first_rows(
    columns: str, queue: str, rows: str, order: str, limit: str = "1", gate: str = "", locked: str = ""
) -> str:
    """The first ``limit`` rows of one kind of ``queue`` (``rows``: ``TAGGED`` or ``PLAIN``;
    ``order``: its index's order), a read of the head of the kind's index; ``gate``: a further
    condition (`` AND ...``), ``locked``: a row lock clause."""
    return (
        f"SELECT {columns} FROM asynctask_job WHERE queue = {queue} AND {rows}{gate} "
        f"ORDER BY {order} LIMIT {limit}{locked}"
    )
