"""The runtime that runs a task's jobs, when it is not AsyncTask's own.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.add_column(sa.Column("runtime", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.drop_column("runtime")
