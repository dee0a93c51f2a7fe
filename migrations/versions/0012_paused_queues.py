"""Paused queues: asynctask_paused_queue.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The claim looks a queue up by name here; the primary key is that lookup's index.
    op.create_table(
        "asynctask_paused_queue",
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("paused_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("asynctask_paused_queue")
