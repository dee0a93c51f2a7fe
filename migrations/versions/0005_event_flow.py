"""The flow-control keys of a task's job, kept with its event (asynctask_event.flow), so that
retrying the task pushes each job again with the key, limit and rate it was created with.

Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"

# Copied, not imported from the models (see 0003).
JSON_VALUE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.add_column("asynctask_event", sa.Column("flow", JSON_VALUE, nullable=True))


def downgrade() -> None:
    op.drop_column("asynctask_event", "flow")
