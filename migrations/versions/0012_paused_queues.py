"""Paused queues: asynctask_paused_queue.

Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"


def upgrade() -> None:
    # The claim looks a queue up by name here; the primary key is that lookup's index.
    op.create_table(
        "asynctask_paused_queue",
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("paused_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("asynctask_paused_queue")
