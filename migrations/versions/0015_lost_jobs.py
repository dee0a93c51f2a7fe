"""Jobs lost with the broker's data: asynctask_task.count_lost, the count of events ``lost``.

Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"


def upgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.add_column(sa.Column("count_lost", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.drop_column("count_lost")
