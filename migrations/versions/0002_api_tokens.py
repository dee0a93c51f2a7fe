"""API tokens: asynctask_api_token.

Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "asynctask_api_token",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_api_token")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_asynctask_api_token_token_hash")),
    )
    op.create_index(op.f("ix_asynctask_api_token_tenant"), "asynctask_api_token", ["tenant"])


def downgrade() -> None:
    op.drop_index(op.f("ix_asynctask_api_token_tenant"), table_name="asynctask_api_token")
    op.drop_table("asynctask_api_token")
