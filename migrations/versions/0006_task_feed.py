"""A fed task's feed settings on its task row (asynctask_task.feed), for the read model.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Copied, not imported from the models (see 0003).
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("asynctask_task", sa.Column("feed", JSON_VALUE, nullable=True))


def downgrade() -> None:
    op.drop_column("asynctask_task", "feed")
