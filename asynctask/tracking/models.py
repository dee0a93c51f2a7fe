"""SQL tables of task tracking (SQLAlchemy 2.0 typed declarative; SQLite and PostgreSQL).

- ``Task``: one bulk operation. Its per-status counts are columns, kept up to date by every
  write, so reading a task's progress is one primary-key lookup however many jobs it has.
- ``Event``: one per job (``job_id`` is the jid): its status, params, attempt, error and progress.
- ``EventMessage``: the append-only message log of an event (what ``current_job().log`` adds).
  ``seq`` is the position of the transition that wrote it in the tracking stream, so a log
  reads in the order things happened, and a replayed transition is recognised and skipped.
- ``FailedItem``: an item of a job's chunk that failed (``asynctask.each``), with its message.
- ``SetAside``: transitions the database refused for their data, kept aside with their bytes.
- ``ApiToken``: a bearer token of the HTTP API, bound to one tenant or, an operator's, to none.
  Only its SHA-256 is stored, so the table cannot hand out working tokens (``asynctask.tokens``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from asynctask.db.base import Base, BigId, JsonValue


class Task(Base):
    __tablename__ = "asynctask_task"

    #: Unguessable (128 random bits, hex): a task id can be handed to a browser.
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    #: The registered name of the job every event of the task runs.
    job_name: Mapped[str] = mapped_column(String(255))
    queue: Mapped[str] = mapped_column(String(255))
    tenant: Mapped[str | None] = mapped_column(String(255))
    meta: Mapped[dict[str, Any] | None]
    state: Mapped[str] = mapped_column(String(16))
    total: Mapped[int] = mapped_column(Integer)
    chunk_size: Mapped[int] = mapped_column(Integer)
    count_enqueue: Mapped[int] = mapped_column(Integer, default=0)
    count_working: Mapped[int] = mapped_column(Integer, default=0)
    count_finish: Mapped[int] = mapped_column(Integer, default=0)
    count_failed: Mapped[int] = mapped_column(Integer, default=0)
    count_error: Mapped[int] = mapped_column(Integer, default=0)
    count_cancelled: Mapped[int] = mapped_column(Integer, default=0)
    count_stopped: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    count_lost: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: Items in all the task's chunks.
    items: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    #: Items its jobs ran one by one (``asynctask.each``) that ended well, and that failed.
    items_done: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    items_failed: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    #: When the first job started.
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: When the last job reached a final state (cleared if a job runs again).
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: A fed task's feed settings as last set (``asynctask.feeds.Feed.as_dict``); None when
    #: the task is not fed. The broker's copy is the one that acts.
    feed: Mapped[dict[str, Any] | None]
    #: The runtime that runs its jobs ("celery", "rq", "dramatiq"); None: AsyncTask's own.
    runtime: Mapped[str | None] = mapped_column(String(32))
    #: How many callbacks it was created with (``TaskCallback``): a task with none costs its
    #: reads and its end no look at their table.
    callbacks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: How many tasks wait for this one (``TaskParent``): a task with none costs its end no
    #: look at their links.
    children: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: Parents that have not ended yet; the task's jobs are held until none is left.
    parents_left: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: A task with parents: "success" (run only if every parent succeeded) or "complete".
    run_if: Mapped[str | None] = mapped_column(String(16))
    #: What holds a task with parents (``tracking.parents``): waiting, releasing, released,
    #: dropping, dropped; None for a task without parents.
    hold: Mapped[str | None] = mapped_column(String(16))
    #: Why a task was cancelled without anyone asking: the parent that did not succeed.
    cancel_reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        # A tenant's tasks, newest first, paged by (created_at, id).
        Index(None, "tenant", "created_at", "id"),
        # Every tenant's tasks, newest first, for operators.
        Index(None, "created_at", "id"),
        # Holds a process that died left to release or drop, found without reading the others.
        Index(
            None,
            "hold",
            postgresql_where=text("hold IN ('releasing', 'dropping')"),
            sqlite_where=text("hold IN ('releasing', 'dropping')"),
        ),
    )


class Event(Base):
    __tablename__ = "asynctask_event"

    #: Insertion order; the cursor of ``list_events``.
    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(64), unique=True)
    #: None for a job tracked on its own (``track=True``) outside any task.
    task_id: Mapped[str | None] = mapped_column(ForeignKey("asynctask_task.id", ondelete="CASCADE"))
    job_name: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    #: The job's args.
    params: Mapped[list[Any] | None]
    #: A task's job: its flow-control payload keys (``concurrency_key``, ``rate_limit``...),
    #: pushed again with it by ``retry_task``; None without any.
    flow: Mapped[dict[str, Any] | None] = mapped_column(
        JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
    )
    #: How many times the job has started (a rerun after an interruption counts too).
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    error_class: Mapped[str | None] = mapped_column(String(255))
    #: The message of the last failure or error.
    error: Mapped[str | None] = mapped_column(Text)
    progress_done: Mapped[int | None] = mapped_column(BigInteger)
    progress_total: Mapped[int | None] = mapped_column(BigInteger)
    #: Stream position of the last status transition applied; older ones are ignored, so a
    #: late ``working`` never overwrites ``finish``.
    seq: Mapped[int] = mapped_column(BigInteger, default=0)
    progress_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Items of its chunk the job ran one by one (``asynctask.each``) that ended well, and that
    #: failed, over every run; None for a job that never did.
    items_done: Mapped[int | None] = mapped_column(BigInteger)
    items_failed: Mapped[int | None] = mapped_column(BigInteger)
    enqueued_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        # "events of task X with status Y after cursor Z, in order" is a range scan of this,
        # and so is "all events of task X after Z" (status left out) via the next one.
        Index(None, "task_id", "status", "id"),
        Index(None, "task_id", "id"),
    )


class EventMessage(Base):
    __tablename__ = "asynctask_event_message"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    event_id: Mapped[int] = mapped_column(ForeignKey("asynctask_event.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text)

    __table_args__ = (UniqueConstraint("event_id", "seq"),)


class FailedItem(Base):
    """An item that failed in a job's chunk: the job went on with the next one."""

    __tablename__ = "asynctask_failed_item"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("asynctask_task.id", ondelete="CASCADE"))
    event_id: Mapped[int] = mapped_column(ForeignKey("asynctask_event.id", ondelete="CASCADE"))
    #: The item's place in its job's chunk, from 0.
    position: Mapped[int] = mapped_column(Integer)
    #: The item as given (a JSON value), or a cut JSON text of it when it is large.
    item: Mapped[Any] = mapped_column(JsonValue, nullable=True)
    message: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        # A failure recorded again (a replayed batch, a rerun of the item) is one row.
        UniqueConstraint("event_id", "position"),
        # A task's failed items in the order of its items: its events' (chunks') order, then
        # each item's place in its chunk.
        Index(None, "task_id", "event_id", "position"),
    )


class TaskCallback(Base):
    """A job pushed once when its task ends (``create_task(on_complete=...)``): its row is the
    outbox that makes the push happen exactly once. The transaction that ends the task marks it
    ``due`` with the job's payload; the broker's push then marks it ``pushed`` (a SQL broker in
    that same transaction, Redis after it, guarded so that a second push does nothing)."""

    __tablename__ = "asynctask_task_callback"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("asynctask_task.id", ondelete="CASCADE"))
    #: complete / success / failure.
    kind: Mapped[str] = mapped_column(String(16))
    job_name: Mapped[str] = mapped_column(String(255))
    #: The runtime that runs the job ("celery", "rq", "dramatiq"), sent through its own client
    #: by a process that knows the job; None: AsyncTask's own, pushed by its broker.
    runtime: Mapped[str | None] = mapped_column(String(32))
    #: The callback job's id, chosen when the task is created.
    jid: Mapped[str] = mapped_column(String(64), unique=True)
    #: The job's payload without its args: what the client and its middleware made of it.
    head: Mapped[dict[str, Any]]
    #: What the job gets after the task's summary (``callback_args``).
    args: Mapped[list[Any]]
    #: waiting / due / pushed.
    state: Mapped[str] = mapped_column(String(8))
    #: The payload pushed, written when the task ends.
    payload: Mapped[str | None] = mapped_column(Text)
    fired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    pushed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("task_id", "kind"),
        # The callbacks a crashed pusher left due, found without reading the others.
        Index(None, "state", postgresql_where=text("state = 'due'"), sqlite_where=text("state = 'due'")),
    )


class TaskParent(Base):
    """A task that waits for another (``create_task(after=[...])``): the link from the child to
    one of its parents, marked when the parent ends (once: a later end of the parent, after a
    retry, changes nothing)."""

    __tablename__ = "asynctask_task_parent"

    child_id: Mapped[str] = mapped_column(
        ForeignKey("asynctask_task.id", ondelete="CASCADE"), primary_key=True
    )
    parent_id: Mapped[str] = mapped_column(
        ForeignKey("asynctask_task.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    #: The parent's place in the child's ``after`` list.
    position: Mapped[int] = mapped_column(Integer)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: Whether the parent had ended ``finished`` (every job and item done well).
    succeeded: Mapped[bool | None] = mapped_column(Boolean)


class TaskAddition(Base):
    """Jobs that a running job of the task added to it (``current_job().task.add``): one row per
    batch of one ``add`` call, written with the jobs' events, so that a job run again (a retry,
    a resume from the same checkpoint) finds its call done and adds nothing twice. On Redis the
    row is the outbox of the jobs' push: ``due`` with their payloads, then ``pushed`` (guarded so
    that a second push does nothing); a SQL broker inserts the jobs in the same transaction, and
    the row is ``pushed`` from the start, without payloads."""

    __tablename__ = "asynctask_task_addition"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("asynctask_task.id", ondelete="CASCADE"))
    #: The call: the adding job's id, the checkpoint it had reached (a resumable job's), and
    #: the call's place among those it made since (``context.JobContext``).
    call: Mapped[str] = mapped_column(String(128))
    #: The batch's place in the call.
    part: Mapped[int] = mapped_column(Integer)
    #: The ids of the jobs the batch added, in item order.
    jids: Mapped[list[Any]]
    queue: Mapped[str] = mapped_column(String(255))
    #: The share of a fair queue the jobs wait in (the task's), or None.
    share: Mapped[str | None] = mapped_column(String(255))
    #: Whether the jobs join the task's feed (held, released as it has room) rather than a queue.
    fed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    #: The jobs' payloads while they wait for their push (Redis): JSON texts, one per line
    #: (JSON spells a newline in a string as an escape); a fed task's as its feed holds them.
    payloads: Mapped[str | None] = mapped_column(Text)
    #: due / pushed.
    state: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    pushed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (
        UniqueConstraint("call", "part"),
        # The additions a crashed job or pusher left due, found without reading the others.
        Index(None, "state", postgresql_where=text("state = 'due'"), sqlite_where=text("state = 'due'")),
    )


class SetAside(Base):
    """A transition the database refused for its data (``tracking.isolate``), kept with its
    bytes for an operator to look at, instead of being retried for ever."""

    __tablename__ = "asynctask_tracking_set_aside"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    #: The job's id as far as it can be stored (cut and escaped: it may be what was refused).
    job_id: Mapped[str | None] = mapped_column(String(255))
    #: The transition as the tracking stream carried it (JSON, UTF-8).
    data: Mapped[bytes] = mapped_column(LargeBinary)
    #: Why the database refused it (its error's first line).
    error: Mapped[str] = mapped_column(Text)


class ApiToken(Base):
    __tablename__ = "asynctask_api_token"

    #: Public, short: what ``asynctask tokens list`` shows and ``tokens revoke`` takes.
    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    #: None: the deployment's token, an operator's of every tenant.
    tenant: Mapped[str | None] = mapped_column(String(200), index=True)
    label: Mapped[str | None] = mapped_column(String(200))
    #: Hex SHA-256 of the whole token; unique, so authenticating is one index lookup.
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: May call the operator endpoints (the deployment's, not one tenant's); elsewhere it
    #: acts as its tenant's.
    operator: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    __table_args__ = (
        CheckConstraint("tenant IS NOT NULL OR operator", name="ck_asynctask_api_token_tenant_or_operator"),
    )
