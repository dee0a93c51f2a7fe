"""Resumable jobs: asynctask_checkpoint, and asynctask_task.count_stopped.

Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"


def upgrade() -> None:
    op.create_table(
        "asynctask_checkpoint",
        sa.Column("jid", sa.String(64), primary_key=True),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("iterations", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("stop", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    # The sweep forgets checkpoints by age.
    op.create_index(op.f("ix_asynctask_checkpoint_updated_at"), "asynctask_checkpoint", ["updated_at"])
    # No task made before had a stopped job.
    op.add_column(
        "asynctask_task", sa.Column("count_stopped", sa.Integer(), nullable=False, server_default="0")
    )


def downgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.drop_column("count_stopped")
    op.drop_table("asynctask_checkpoint")
