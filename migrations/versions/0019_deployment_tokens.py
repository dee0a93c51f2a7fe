"""Deployment tokens: an operator's API token may belong to no tenant.

Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"

CHECK = "ck_asynctask_api_token_tenant_or_operator"


def _tokens_table() -> sa.Table:
    """The table as revisions 0002 and 0010 made it: batch mode copies SQLite's table from it,
    which also lets ``alembic upgrade --sql`` write the copy without reading the database."""
    return sa.Table(
        "asynctask_api_token",
        sa.MetaData(),
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("tenant", sa.String(length=200), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("operator", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("id", name="pk_asynctask_api_token"),
        sa.UniqueConstraint("token_hash", name="uq_asynctask_api_token_token_hash"),
        sa.Index("ix_asynctask_api_token_tenant", "tenant"),
    )


def upgrade() -> None:
    # SQLite changes a column's nullability only by copying the table, which batch mode does.
    with op.batch_alter_table("asynctask_api_token", copy_from=_tokens_table()) as batch:
        batch.alter_column("tenant", existing_type=sa.String(200), nullable=True)
        batch.create_check_constraint(CHECK, "tenant IS NOT NULL OR operator")


def downgrade() -> None:
    # The schema before has no token of no tenant: such tokens go, and stop working.
    op.execute("DELETE FROM asynctask_api_token WHERE tenant IS NULL")
    with op.batch_alter_table("asynctask_api_token") as batch:
        batch.drop_constraint(CHECK, type_="check")
        batch.alter_column("tenant", existing_type=sa.String(200), nullable=False)
