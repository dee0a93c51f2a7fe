"""The flow-control keys of a task's job, kept with its event (asynctask_event.flow), so that
retrying the task pushes each job again with the key, limit and rate it was created with.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Copied, not imported from the models (see 0003).
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("asynctask_event", sa.Column("flow", JSON_VALUE, nullable=True))


def downgrade() -> None:
    op.drop_column("asynctask_event", "flow")
