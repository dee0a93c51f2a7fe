"""A worker process's event loop lag, renewed by each heartbeat.

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"


def upgrade() -> None:
    # A plain ALTER on every dialect: SQLite adds a column with a constant default in place.
    op.add_column(
        "asynctask_process",
        sa.Column("loop_lag_us", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("asynctask_process") as batch:
        batch.drop_column("loop_lag_us")
