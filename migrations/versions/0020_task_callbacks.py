"""Callbacks of a task: jobs pushed once when it ends.

Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0020"
down_revision = "0019"

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.add_column(sa.Column("callbacks", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "asynctask_task_callback",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column(
            "task_id",
            sa.String(32),
            sa.ForeignKey(
                "asynctask_task.id",
                ondelete="CASCADE",
                name="fk_asynctask_task_callback_task_id_asynctask_task",
            ),
            nullable=False,
        ),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("job_name", sa.String(255), nullable=False),
        sa.Column("jid", sa.String(64), nullable=False),
        sa.Column("head", _JSON, nullable=False),
        sa.Column("args", _JSON, nullable=False),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("payload", sa.Text(), nullable=True),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pushed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_asynctask_task_callback"),
        sa.UniqueConstraint("jid", name="uq_asynctask_task_callback_jid"),
        sa.UniqueConstraint("task_id", "kind", name="uq_asynctask_task_callback_task_id_kind"),
    )
    op.create_index(
        "ix_asynctask_task_callback_state",
        "asynctask_task_callback",
        ["state"],
        postgresql_where=sa.text("state = 'due'"),
        sqlite_where=sa.text("state = 'due'"),
    )


def downgrade() -> None:
    op.drop_index("ix_asynctask_task_callback_state", table_name="asynctask_task_callback")
    op.drop_table("asynctask_task_callback")
    with op.batch_alter_table("asynctask_task") as batch:
        batch.drop_column("callbacks")
