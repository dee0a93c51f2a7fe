"""Operator tokens: asynctask_api_token.operator.

Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    # Every token made before was a tenant's.
    op.add_column(
        "asynctask_api_token",
        sa.Column("operator", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    with op.batch_alter_table("asynctask_api_token") as batch:
        batch.drop_column("operator")
