"""SQL broker tables: asynctask_job, asynctask_process, asynctask_process_signal,
asynctask_stat, asynctask_cancelled_task, asynctask_counter; on PostgreSQL the sequence
asynctask_tracking_seq.

Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"

# Copies of asynctask.brokers.sql.models' column types, not imports: a revision must keep
# creating the schema it was written for after the models move on.
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TRACKING_SEQUENCE = "asynctask_tracking_seq"


def _postgresql() -> bool:
    # The context's dialect, not a bind: offline mode (``alembic upgrade --sql``) has none.
    return op.get_context().dialect.name == "postgresql"


def _partial_index(name: str, table: str, columns: list[str], where: sa.TextClause) -> None:
    """An index of the rows ``where`` holds, alike on both dialects the broker runs on."""
    op.create_index(name, table, columns, sqlite_where=where, postgresql_where=where)


def upgrade() -> None:
    op.create_table(
        "asynctask_job",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("jid", sa.String(length=64), nullable=False),
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("run_at", sa.Float(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("locked_by", sa.String(length=255), nullable=True),
        sa.Column("locked_at", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_job")),
        sqlite_autoincrement=True,
    )
    _partial_index(
        "ix_asynctask_job_fetch",
        "asynctask_job",
        ["queue", "priority", "id"],
        sa.text("state = 'queued' AND locked_by IS NULL"),
    )
    _partial_index(
        "ix_asynctask_job_set", "asynctask_job", ["state", "run_at", "id"], sa.text("state <> 'queued'")
    )
    _partial_index(
        "ix_asynctask_job_claimed", "asynctask_job", ["locked_by"], sa.text("locked_by IS NOT NULL")
    )
    op.create_index(op.f("ix_asynctask_job_jid"), "asynctask_job", ["jid"])

    op.create_table(
        "asynctask_process",
        sa.Column("identity", sa.String(length=255), nullable=False),
        sa.Column("info", sa.Text(), nullable=False),
        sa.Column("busy", sa.Integer(), nullable=False),
        sa.Column("beat", sa.Float(), nullable=False),
        sa.Column("quiet", sa.Boolean(), nullable=False),
        sa.Column("rss", sa.BigInteger(), nullable=False),
        sa.Column("rtt_us", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("work", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("identity", name=op.f("pk_asynctask_process")),
    )

    op.create_table(
        "asynctask_process_signal",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("identity", sa.String(length=255), nullable=False),
        sa.Column("signal", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_process_signal")),
    )
    op.create_index(op.f("ix_asynctask_process_signal_identity"), "asynctask_process_signal", ["identity"])

    op.create_table(
        "asynctask_stat",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_asynctask_stat")),
    )

    op.create_table(
        "asynctask_cancelled_task",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_asynctask_cancelled_task")),
    )

    op.create_table(
        "asynctask_counter",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_asynctask_counter")),
    )

    if _postgresql():
        op.execute(sa.schema.CreateSequence(sa.Sequence(TRACKING_SEQUENCE)))


def downgrade() -> None:
    if _postgresql():
        op.execute(sa.schema.DropSequence(sa.Sequence(TRACKING_SEQUENCE)))
    op.drop_table("asynctask_counter")
    op.drop_table("asynctask_cancelled_task")
    op.drop_table("asynctask_stat")
    op.drop_index(op.f("ix_asynctask_process_signal_identity"), table_name="asynctask_process_signal")
    op.drop_table("asynctask_process_signal")
    op.drop_table("asynctask_process")
    op.drop_index(op.f("ix_asynctask_job_jid"), table_name="asynctask_job")
    op.drop_index("ix_asynctask_job_claimed", table_name="asynctask_job")
    op.drop_index("ix_asynctask_job_set", table_name="asynctask_job")
    op.drop_index("ix_asynctask_job_fetch", table_name="asynctask_job")
    op.drop_table("asynctask_job")
