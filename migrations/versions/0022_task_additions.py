"""Jobs that running jobs add to their own task.

Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0022"
down_revision = "0021"

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "asynctask_task_addition",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column(
            "task_id",
            sa.String(32),
            sa.ForeignKey(
                "asynctask_task.id",
                ondelete="CASCADE",
                name="fk_asynctask_task_addition_task_id_asynctask_task",
            ),
            nullable=False,
        ),
        sa.Column("call", sa.String(128), nullable=False),
        sa.Column("part", sa.Integer(), nullable=False),
        sa.Column("jids", _JSON, nullable=False),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("share", sa.String(255), nullable=True),
        sa.Column("fed", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("payloads", sa.Text(), nullable=True),
        sa.Column("state", sa.String(8), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("pushed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_asynctask_task_addition"),
        sa.UniqueConstraint("call", "part", name="uq_asynctask_task_addition_call_part"),
    )
    op.create_index(
        "ix_asynctask_task_addition_state",
        "asynctask_task_addition",
        ["state"],
        postgresql_where=sa.text("state = 'due'"),
        sqlite_where=sa.text("state = 'due'"),
    )


def downgrade() -> None:
    op.drop_index("ix_asynctask_task_addition_state", table_name="asynctask_task_addition")
    op.drop_table("asynctask_task_addition")
