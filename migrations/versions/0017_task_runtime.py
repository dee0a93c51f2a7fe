"""The runtime that runs a task's jobs, when it is not AsyncTask's own.

Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"


def upgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.add_column(sa.Column("runtime", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.drop_column("runtime")
