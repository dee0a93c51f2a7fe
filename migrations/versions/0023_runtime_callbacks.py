"""Callbacks that another runtime runs.

Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"


def upgrade() -> None:
    with op.batch_alter_table("asynctask_task_callback") as batch:
        batch.add_column(sa.Column("runtime", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("asynctask_task_callback") as batch:
        batch.drop_column("runtime")
