"""Flow control in the SQL broker: the job columns lane and holds, the line and holder
indexes, and the tables asynctask_lane, asynctask_unique, asynctask_rate_key, asynctask_rate.

Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"

# Copied, not imported from the models (see 0003).
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _partial_index(name: str, table: str, columns: list[str], where: sa.TextClause) -> None:
    """An index of the rows ``where`` holds, alike on both dialects the broker runs on."""
    op.create_index(name, table, columns, sqlite_where=where, postgresql_where=where)


def upgrade() -> None:
    # Plain ALTER TABLE on both (SQLite adds and drops columns itself since 3.35): a batch
    # copy of the table could not be written offline (``--sql``).
    op.add_column("asynctask_job", sa.Column("lane", sa.String(length=64), nullable=True))
    op.add_column(
        "asynctask_job", sa.Column("holds", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )
    _partial_index(
        "ix_asynctask_job_lane",
        "asynctask_job",
        ["lane", "priority", "run_at", "id"],
        sa.text("state = 'lane'"),
    )
    _partial_index("ix_asynctask_job_holders", "asynctask_job", ["lane"], sa.text("holds"))
    op.create_table(
        "asynctask_lane",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("lim", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_asynctask_lane")),
    )
    op.create_table(
        "asynctask_unique",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("jid", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_asynctask_unique")),
    )
    op.create_index(op.f("ix_asynctask_unique_expires_at"), "asynctask_unique", ["expires_at"])
    op.create_table(
        "asynctask_rate_key",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("next_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name=op.f("pk_asynctask_rate_key")),
    )
    op.create_table(
        "asynctask_rate",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_rate")),
    )
    op.create_index(op.f("ix_asynctask_rate_digest_at"), "asynctask_rate", ["digest", "at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_asynctask_rate_digest_at"), table_name="asynctask_rate")
    op.drop_table("asynctask_rate")
    op.drop_table("asynctask_rate_key")
    op.drop_index(op.f("ix_asynctask_unique_expires_at"), table_name="asynctask_unique")
    op.drop_table("asynctask_unique")
    op.drop_table("asynctask_lane")
    op.drop_index("ix_asynctask_job_holders", table_name="asynctask_job")
    op.drop_index("ix_asynctask_job_lane", table_name="asynctask_job")
    op.drop_column("asynctask_job", "holds")
    op.drop_column("asynctask_job", "lane")
