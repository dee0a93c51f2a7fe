"""SQL tables of the SQL broker (SQLite and PostgreSQL), next to the tracking tables in the
same database and the same Alembic history (revision 0003).

- ``QueuedJob``: every job the broker holds, whatever its state: waiting in a queue
  (``queued``), in the schedule, the retry set or the dead set. ``payload`` is the job's JSON
  exactly as Redis would hold it. A claimed job keeps its row, with ``locked_by`` set to the
  claiming process; it is deleted when done, or moved to another state.
  ``run_at`` is when a scheduled or retried job is due, or when a dead job died (the sorted
  sets' score); for a queued job, when it was enqueued. Lower ``priority`` runs first within
  a queue, then the oldest ``id``.
- ``WorkerProcess``: the heartbeat record of a live worker process; a process whose
  ``expires_at`` is past is dead, and its claimed jobs are taken back.
- ``ProcessSignal``: signals (TSTP, TERM, TTIN) sent to a process from outside.
- ``StatCounter``: processed/failed totals, lifetime and per day.
- ``CancelledTask``: tasks cancelled, read by workers before starting a task's job.
- ``Checkpoint``: a resumable job's last cursor and stop request, by jid (revision 0011,
  ``brokers.checkpoints``).
- ``PausedQueue``: the paused queues, whose jobs no claim takes until they are resumed
  (revision 0012).
- ``Counter``: named counters (the tracking transition number on SQLite; PostgreSQL uses
  the sequence ``asynctask_tracking_seq``, ``TRACKING_SEQUENCE``).

Flow control (revision 0004, docs/internals/flow-control-sql.md): keys are stored by their
SHA-256 ``digest`` (fixed width, whatever the key's length or characters), with the key
itself beside it for reading.

- ``QueuedJob.lane``: the digest of a keyed job's concurrency key; ``holds``: the row holds
  one of its key's slots. A job waiting in its key's line has state ``lane``, outside the
  fetch index.
- ``Lane``: one row per concurrency key: its limit, and the lock every transaction that adds
  to or promotes from the key's line takes first.
- ``UniqueHold``: the holder of a unique key, until it ends, starts or expires.
- ``RateKey`` and ``RateStart``: a rate key's lock and the spreading of postponed jobs; the
  sliding log of its starts.

Task feeds (revision 0007, docs/internals/feeds-sql.md):

- ``QueuedJob.feed``: the task id of a fed task's job. A job held by its feed (not released
  yet) has state ``held``, outside the fetch index; the held jobs are released in
  (``run_at``, ``id``) order. A fed row in state ``queued``, ``lane`` or ``scheduled`` (a rate
  limit postponed it) is *out*: it takes one of its feed's ``parallel`` slots.
- ``FeedRow``: one row per fed task: its settings, the lock every release of it takes first,
  the number of its held rows, and when the ticker must look at it next.

Fair share (revision 0008, docs/internals/fair-share-sql.md):

- ``QueuedJob.turn``: the round a task's job is served in, in a queue served fairly; NULL for
  the jobs outside any task (the plain share), which take one turn in every round.
- ``Share``: one row per tenant and queue: the turn after its last tagged job, the lock that
  orders its concurrent pushes, and the queue's high-water mark once its jobs all ran.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Float, Index, Integer, Sequence, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from asynctask.db.base import Base, BigId

#: Numbers tracking transitions on PostgreSQL (concurrent writers draw from it without
#: serialising on a counter row). SQLite has no sequences: it uses the ``Counter`` row.
TRACKING_SEQUENCE = Sequence("asynctask_tracking_seq", metadata=Base.metadata)

#: Job states.
QUEUED = "queued"
SCHEDULED = "scheduled"
RETRY = "retry"
DEAD = "dead"
#: Waiting in its concurrency key's line (not claimable).
LANE = "lane"
#: Held by its task's feed, not released yet (not claimable).
HELD = "held"
#: Stopped by ``stop_job`` and kept, with its cursor, until resumed (not claimable).
STOPPED = "stopped"
#: ``Share.share`` of the jobs outside any task: its ``last_turn`` is the round after the
#: one a plain job was last claimed in (no tenant's share is empty: ``fairness.share_of``).
PLAIN_SHARE = ""


class QueuedJob(Base):
    __tablename__ = "asynctask_job"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    jid: Mapped[str] = mapped_column(String(64))
    queue: Mapped[str] = mapped_column(String(255))
    state: Mapped[str] = mapped_column(String(16))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    run_at: Mapped[float] = mapped_column(Float)
    payload: Mapped[str] = mapped_column(Text)
    #: How many times a worker claimed the job.
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    locked_by: Mapped[str | None] = mapped_column(String(255))
    locked_at: Mapped[float | None] = mapped_column(Float)
    #: "Class: message" of the last failure, for inspection in SQL.
    last_error: Mapped[str | None] = mapped_column(Text)
    #: The digest of the job's concurrency key (``Lane.digest``), if it has one.
    lane: Mapped[str | None] = mapped_column(String(64))
    #: Whether the row holds one of its key's slots (runnable, running, or retrying on hold).
    holds: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    #: The task id of a fed task's job (``FeedRow.task_id``); NULL for any other job.
    feed: Mapped[str | None] = mapped_column(String(32))
    #: The job's round in a fair queue (``Share``); NULL: the plain share, ordered by id.
    turn: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        # The fetch: the first unclaimed job of a queue by (priority, id) is the head of this.
        Index(
            "ix_asynctask_job_fetch",
            "queue",
            "priority",
            "id",
            sqlite_where=text("state = 'queued' AND locked_by IS NULL"),
            postgresql_where=text("state = 'queued' AND locked_by IS NULL"),
        ),
        # A fair queue's claim: its tagged rows in turn order, and its plain rows in push order
        # (the fetch index above holds both kinds mixed, which a fair claim would have to
        # walk past). Separate indexes make each kind's head a LIMIT read.
        Index(
            "ix_asynctask_job_turn",
            "queue",
            "priority",
            "turn",
            "id",
            sqlite_where=text("state = 'queued' AND locked_by IS NULL AND turn IS NOT NULL"),
            postgresql_where=text("state = 'queued' AND locked_by IS NULL AND turn IS NOT NULL"),
        ),
        Index(
            "ix_asynctask_job_plain",
            "queue",
            "priority",
            "id",
            sqlite_where=text("state = 'queued' AND locked_by IS NULL AND turn IS NULL"),
            postgresql_where=text("state = 'queued' AND locked_by IS NULL AND turn IS NULL"),
        ),
        # The schedule, retry and dead sets, ordered by score (the poller reads the due head).
        Index(
            "ix_asynctask_job_set",
            "state",
            "run_at",
            "id",
            sqlite_where=text("state <> 'queued'"),
            postgresql_where=text("state <> 'queued'"),
        ),
        Index(
            "ix_asynctask_job_claimed",
            "locked_by",
            sqlite_where=text("locked_by IS NOT NULL"),
            postgresql_where=text("locked_by IS NOT NULL"),
        ),
        Index(None, "jid"),
        # A key's line, in promotion order: priority, then when the job entered the line.
        Index(
            "ix_asynctask_job_lane",
            "lane",
            "priority",
            "run_at",
            "id",
            sqlite_where=text("state = 'lane'"),
            postgresql_where=text("state = 'lane'"),
        ),
        # A key's slot holders, counted at every promotion.
        Index(
            "ix_asynctask_job_holders",
            "lane",
            sqlite_where=text("holds"),
            postgresql_where=text("holds"),
        ),
        # A feed's held jobs, in release order.
        Index(
            "ix_asynctask_job_held",
            "feed",
            "run_at",
            "id",
            sqlite_where=text("state = 'held'"),
            postgresql_where=text("state = 'held'"),
        ),
        # A feed's jobs out (released, not ended), counted at every release from its out_from.
        Index(
            "ix_asynctask_job_out",
            "feed",
            "id",
            sqlite_where=text("feed IS NOT NULL AND state IN ('queued', 'lane', 'scheduled')"),
            postgresql_where=text("feed IS NOT NULL AND state IN ('queued', 'lane', 'scheduled')"),
        ),
        # A job is acknowledged by its row id, so SQLite must never hand a deleted job's id to
        # a new one (it reuses the highest rowid without AUTOINCREMENT).
        {"sqlite_autoincrement": True},
    )


class WorkerProcess(Base):
    __tablename__ = "asynctask_process"

    identity: Mapped[str] = mapped_column(String(255), primary_key=True)
    #: The process's description as JSON (Sidekiq's ``info``).
    info: Mapped[str] = mapped_column(Text)
    busy: Mapped[int] = mapped_column(Integer, default=0)
    beat: Mapped[float] = mapped_column(Float)
    quiet: Mapped[bool] = mapped_column(Boolean, default=False)
    rss: Mapped[int] = mapped_column(BigInteger, default=0)
    rtt_us: Mapped[int] = mapped_column(Integer, default=0)
    #: The longest its event loop was late since the previous beat (0 without async jobs).
    loop_lag_us: Mapped[int] = mapped_column(BigInteger, default=0)
    expires_at: Mapped[float] = mapped_column(Float)
    #: JSON object: thread id -> JSON of the job it runs (Sidekiq's ``<identity>:work`` hash).
    work: Mapped[str] = mapped_column(Text, default="{}")


class ProcessSignal(Base):
    __tablename__ = "asynctask_process_signal"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    identity: Mapped[str] = mapped_column(String(255), index=True)
    signal: Mapped[str] = mapped_column(String(16))


class NamedCount:
    """The columns of a table of counts by name."""

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger, default=0)


class StatCounter(NamedCount, Base):
    """Named ``processed``, ``failed``, ``processed:YYYY-MM-DD``, ``failed:YYYY-MM-DD``."""

    __tablename__ = "asynctask_stat"


class CancelledTask(Base):
    __tablename__ = "asynctask_cancelled_task"

    task_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[float] = mapped_column(Float)


class Checkpoint(Base):
    __tablename__ = "asynctask_checkpoint"

    jid: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: The last stored cursor as JSON text; NULL while only a stop was requested.
    cursor: Mapped[str | None] = mapped_column(Text)
    iterations: Mapped[int] = mapped_column(BigInteger, default=0)
    stop: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    updated_at: Mapped[float] = mapped_column(Float, index=True)


class PausedQueue(Base):
    __tablename__ = "asynctask_paused_queue"

    queue: Mapped[str] = mapped_column(String(255), primary_key=True)
    paused_at: Mapped[float] = mapped_column(Float)


class Counter(NamedCount, Base):
    __tablename__ = "asynctask_counter"


class Lane(Base):
    __tablename__ = "asynctask_lane"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(Text)
    #: The limit carried by the key's last pushed job.
    lim: Mapped[int] = mapped_column(Integer)


class UniqueHold(Base):
    __tablename__ = "asynctask_unique"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(Text)
    jid: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class RateKey(Base):
    __tablename__ = "asynctask_rate_key"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(Text)
    #: When the last job postponed by this key is due (the next one is due a spacing later).
    next_at: Mapped[float] = mapped_column(Float, default=0.0)


class RateStart(Base):
    __tablename__ = "asynctask_rate"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    digest: Mapped[str] = mapped_column(String(64))
    at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index(None, "digest", "at"),)


class FeedRow(Base):
    __tablename__ = "asynctask_feed"

    task_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    parallel: Mapped[int] = mapped_column(Integer)
    #: The feed's interval, seconds (0: release whenever a job ends).
    spacing: Mapped[float] = mapped_column(Float)
    priority: Mapped[int] = mapped_column(Integer)
    paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))
    last_release_at: Mapped[float | None] = mapped_column(Float)
    #: How many of the feed's rows are in state ``held``: changed with them, under this row's lock.
    held: Mapped[int] = mapped_column(BigInteger, default=0)
    #: When the ticker must release from this feed (an interval's end, a deferred release, or
    #: the safety net's next look); NULL when only an end of one of its jobs can make room.
    next_at: Mapped[float | None] = mapped_column(Float)
    #: The last staged row released, (run_at, id): a release looks for staged rows after it,
    #: so that it never walks the index entries of the rows released before it, which stay in
    #: the held index until a vacuum and made each release slower than the one before.
    released_run_at: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    released_id: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))
    #: No row of the feed out has a smaller id: a release counts the rows out from it, so that
    #: it does not walk the out index's entries of the jobs ended before (dead until a vacuum).
    out_from: Mapped[int] = mapped_column(BigInteger, default=0, server_default=text("0"))

    __table_args__ = (
        Index(
            "ix_asynctask_feed_next_at",
            "next_at",
            sqlite_where=text("next_at IS NOT NULL"),
            postgresql_where=text("next_at IS NOT NULL"),
        ),
    )


class Share(Base):
    __tablename__ = "asynctask_share"

    queue: Mapped[str] = mapped_column(String(255), primary_key=True)
    #: ``tenant:<name>`` (``fairness.share_of``); a task without a tenant has no row.
    share: Mapped[str] = mapped_column(Text, primary_key=True)
    #: The turn after the share's last tagged job: its next task starts there, or at the
    #: queue's head turn if that is later (the share's jobs all ran).
    last_turn: Mapped[int] = mapped_column(BigInteger)


class PeriodicSchedule(Base):
    """A periodic schedule (revision 0009, ``brokers.periodic``): what the workers declaring
    it said of it, and ``last``, the tick whose move forward enqueues each tick once."""

    __tablename__ = "asynctask_periodic"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    job: Mapped[str] = mapped_column(Text)
    cron: Mapped[str] = mapped_column(Text)
    tz: Mapped[str] = mapped_column(Text)
    queue: Mapped[str] = mapped_column(String(255))
    catch_up: Mapped[str] = mapped_column(String(16))
    declared_at: Mapped[float] = mapped_column(Float)
    last: Mapped[int | None] = mapped_column(BigInteger)
    last_jid: Mapped[str | None] = mapped_column(String(64))
    last_enqueued_at: Mapped[float | None] = mapped_column(Float)
    paused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=text("false"))


class PeriodicScheduler(Base):
    """A worker process taking part in periodic scheduling, and its last pass."""

    __tablename__ = "asynctask_periodic_scheduler"

    identity: Mapped[str] = mapped_column(String(255), primary_key=True)
    beat: Mapped[float] = mapped_column(Float)
