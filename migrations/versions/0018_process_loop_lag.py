"""A worker process's event loop lag, renewed by each heartbeat.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ALTER on every dialect: SQLite adds a column with a constant default in place.
    op.add_column(
        "asynctask_process",
        sa.Column("loop_lag_us", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("asynctask_process") as batch:
        batch.drop_column("loop_lag_us")
