"""Periodic schedules in the SQL broker: asynctask_periodic and asynctask_periodic_scheduler.

Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    op.create_table(
        "asynctask_periodic",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("job", sa.Text(), nullable=False),
        sa.Column("cron", sa.Text(), nullable=False),
        sa.Column("tz", sa.Text(), nullable=False),
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("catch_up", sa.String(length=16), nullable=False),
        sa.Column("declared_at", sa.Float(), nullable=False),
        sa.Column("last", sa.BigInteger(), nullable=True),
        sa.Column("last_jid", sa.String(length=64), nullable=True),
        sa.Column("last_enqueued_at", sa.Float(), nullable=True),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_asynctask_periodic")),
    )
    op.create_table(
        "asynctask_periodic_scheduler",
        sa.Column("identity", sa.String(length=255), nullable=False),
        sa.Column("beat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("identity", name=op.f("pk_asynctask_periodic_scheduler")),
    )


def downgrade() -> None:
    op.drop_table("asynctask_periodic_scheduler")
    op.drop_table("asynctask_periodic")
