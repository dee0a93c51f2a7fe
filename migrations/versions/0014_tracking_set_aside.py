"""Transitions set aside: asynctask_tracking_set_aside keeps what the database refused.

Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "asynctask_tracking_set_aside",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.String(255), nullable=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
    )
    op.create_index(op.f("ix_asynctask_tracking_set_aside_at"), "asynctask_tracking_set_aside", ["at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_asynctask_tracking_set_aside_at"), table_name="asynctask_tracking_set_aside")
    op.drop_table("asynctask_tracking_set_aside")
