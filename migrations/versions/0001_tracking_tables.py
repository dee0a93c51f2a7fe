"""Tracking tables: asynctask_task, asynctask_event, asynctask_event_message.

Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None

# Copies of asynctask.tracking.models' column types, not imports: a revision must keep creating
# the schema it was written for after the models move on.
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "asynctask_task",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("job_name", sa.String(length=255), nullable=False),
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=True),
        sa.Column("meta", JSON_VALUE, nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("chunk_size", sa.Integer(), nullable=False),
        sa.Column("count_enqueue", sa.Integer(), nullable=False),
        sa.Column("count_working", sa.Integer(), nullable=False),
        sa.Column("count_finish", sa.Integer(), nullable=False),
        sa.Column("count_failed", sa.Integer(), nullable=False),
        sa.Column("count_error", sa.Integer(), nullable=False),
        sa.Column("count_cancelled", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_task")),
    )
    op.create_index(
        op.f("ix_asynctask_task_tenant_created_at_id"), "asynctask_task", ["tenant", "created_at", "id"]
    )

    op.create_table(
        "asynctask_event",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=True),
        sa.Column("job_name", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("params", JSON_VALUE, nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("error_class", sa.String(length=255), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("progress_done", sa.BigInteger(), nullable=True),
        sa.Column("progress_total", sa.BigInteger(), nullable=True),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("progress_seq", sa.BigInteger(), nullable=False),
        sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_event")),
        sa.UniqueConstraint("job_id", name=op.f("uq_asynctask_event_job_id")),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["asynctask_task.id"],
            name=op.f("fk_asynctask_event_task_id_asynctask_task"),
            ondelete="CASCADE",
        ),
    )
    op.create_index(
        op.f("ix_asynctask_event_task_id_status_id"), "asynctask_event", ["task_id", "status", "id"]
    )
    op.create_index(op.f("ix_asynctask_event_task_id_id"), "asynctask_event", ["task_id", "id"])

    op.create_table(
        "asynctask_event_message",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("event_id", BIG_ID, nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_event_message")),
        sa.UniqueConstraint("event_id", "seq", name=op.f("uq_asynctask_event_message_event_id_seq")),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["asynctask_event.id"],
            name=op.f("fk_asynctask_event_message_event_id_asynctask_event"),
            ondelete="CASCADE",
        ),
    )


def downgrade() -> None:
    op.drop_table("asynctask_event_message")
    op.drop_index(op.f("ix_asynctask_event_task_id_id"), table_name="asynctask_event")
    op.drop_index(op.f("ix_asynctask_event_task_id_status_id"), table_name="asynctask_event")
    op.drop_table("asynctask_event")
    op.drop_index(op.f("ix_asynctask_task_tenant_created_at_id"), table_name="asynctask_task")
    op.drop_table("asynctask_task")
