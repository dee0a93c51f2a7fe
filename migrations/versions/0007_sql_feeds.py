"""Task feeds in the SQL broker: the job column feed, the job state held, the held and out
indexes, and the table asynctask_feed (docs/internals/feeds-sql.md).

Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"

# Copied, not imported from the models (see 0003): a migration must build the schema of its
# own time.
HELD = sa.text("state = 'held'")
OUT = sa.text("feed IS NOT NULL AND state IN ('queued', 'lane', 'scheduled')")
DUE = sa.text("next_at IS NOT NULL")


def _partial_index(name: str, table: str, columns: list[str], where: sa.TextClause) -> None:
    """An index of the rows ``where`` holds, alike on both dialects the broker runs on."""
    op.create_index(name, table, columns, sqlite_where=where, postgresql_where=where)


def upgrade() -> None:
    op.add_column("asynctask_job", sa.Column("feed", sa.String(length=32), nullable=True))
    _partial_index("ix_asynctask_job_held", "asynctask_job", ["feed", "run_at", "id"], HELD)
    _partial_index("ix_asynctask_job_out", "asynctask_job", ["feed", "id"], OUT)
    op.create_table(
        "asynctask_feed",
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("parallel", sa.Integer(), nullable=False),
        sa.Column("spacing", sa.Float(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("last_release_at", sa.Float(), nullable=True),
        sa.Column("held", sa.BigInteger(), nullable=False),
        sa.Column("next_at", sa.Float(), nullable=True),
        sa.Column("released_run_at", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("released_id", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("out_from", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_asynctask_feed")),
    )
    _partial_index("ix_asynctask_feed_next_at", "asynctask_feed", ["next_at"], DUE)


def downgrade() -> None:
    op.drop_index("ix_asynctask_feed_next_at", table_name="asynctask_feed")
    op.drop_table("asynctask_feed")
    op.drop_index("ix_asynctask_job_out", table_name="asynctask_job")
    op.drop_index("ix_asynctask_job_held", table_name="asynctask_job")
    op.drop_column("asynctask_job", "feed")
