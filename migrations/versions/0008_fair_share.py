"""Fair share in the SQL broker: the job column turn, its claim indexes, and the table
asynctask_share (docs/internals/fair-share-sql.md).

Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"

# Copied, not imported from the models (see 0003): a migration must build the schema of its
# own time.
TAGGED = sa.text("state = 'queued' AND locked_by IS NULL AND turn IS NOT NULL")
PLAIN = sa.text("state = 'queued' AND locked_by IS NULL AND turn IS NULL")


def _partial_index(name: str, table: str, columns: list[str], where: sa.TextClause) -> None:
    """An index of the rows ``where`` holds, alike on both dialects the broker runs on."""
    op.create_index(name, table, columns, sqlite_where=where, postgresql_where=where)


def upgrade() -> None:
    # Rows waiting already keep NULL: they are the plain share, served in push order.
    op.add_column("asynctask_job", sa.Column("turn", sa.BigInteger(), nullable=True))
    _partial_index("ix_asynctask_job_turn", "asynctask_job", ["queue", "priority", "turn", "id"], TAGGED)
    _partial_index("ix_asynctask_job_plain", "asynctask_job", ["queue", "priority", "id"], PLAIN)
    op.create_table(
        "asynctask_share",
        sa.Column("queue", sa.String(length=255), nullable=False),
        sa.Column("share", sa.Text(), nullable=False),
        sa.Column("last_turn", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", "share", name=op.f("pk_asynctask_share")),
    )


def downgrade() -> None:
    op.drop_table("asynctask_share")
    op.drop_index("ix_asynctask_job_plain", table_name="asynctask_job")
    op.drop_index("ix_asynctask_job_turn", table_name="asynctask_job")
    op.drop_column("asynctask_job", "turn")
