"""Tasks that wait for other tasks: their links, and what holds their jobs.

Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"


def upgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        batch.add_column(sa.Column("children", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("parents_left", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("run_if", sa.String(16), nullable=True))
        batch.add_column(sa.Column("hold", sa.String(16), nullable=True))
        batch.add_column(sa.Column("cancel_reason", sa.Text(), nullable=True))
    op.create_table(
        "asynctask_task_parent",
        sa.Column(
            "child_id",
            sa.String(32),
            sa.ForeignKey(
                "asynctask_task.id",
                ondelete="CASCADE",
                name="fk_asynctask_task_parent_child_id_asynctask_task",
            ),
            nullable=False,
        ),
        sa.Column(
            "parent_id",
            sa.String(32),
            sa.ForeignKey(
                "asynctask_task.id",
                ondelete="CASCADE",
                name="fk_asynctask_task_parent_parent_id_asynctask_task",
            ),
            nullable=False,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("succeeded", sa.Boolean(), nullable=True),
        sa.PrimaryKeyConstraint("child_id", "parent_id", name="pk_asynctask_task_parent"),
    )
    op.create_index("ix_asynctask_task_parent_parent_id", "asynctask_task_parent", ["parent_id"])
    op.create_index(
        "ix_asynctask_task_hold",
        "asynctask_task",
        ["hold"],
        postgresql_where=sa.text("hold IN ('releasing', 'dropping')"),
        sqlite_where=sa.text("hold IN ('releasing', 'dropping')"),
    )


def downgrade() -> None:
    op.drop_index("ix_asynctask_task_hold", table_name="asynctask_task")
    op.drop_index("ix_asynctask_task_parent_parent_id", table_name="asynctask_task_parent")
    op.drop_table("asynctask_task_parent")
    with op.batch_alter_table("asynctask_task") as batch:
        for column in ("cancel_reason", "hold", "run_if", "parents_left", "children"):
            batch.drop_column(column)
