"""A fed task's feed settings on its task row (asynctask_task.feed), for the read model.

Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"

# Copied, not imported from the models (see 0003).
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("asynctask_task", sa.Column("feed", JSON_VALUE, nullable=True))


def downgrade() -> None:
    op.drop_column("asynctask_task", "feed")
