"""Items run one by one: their counts on tasks and events, and asynctask_failed_item.

Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"


def upgrade() -> None:
    with op.batch_alter_table("asynctask_task") as batch:
        for name in ("items", "items_done", "items_failed"):
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("asynctask_event") as batch:
        for name in ("items_done", "items_failed"):
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
    op.create_table(
        "asynctask_failed_item",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column(
            "task_id",
            sa.String(32),
            sa.ForeignKey(
                "asynctask_task.id",
                ondelete="CASCADE",
                name=op.f("fk_asynctask_failed_item_task_id_asynctask_task"),
            ),
            nullable=True,
        ),
        sa.Column(
            "event_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            sa.ForeignKey(
                "asynctask_event.id",
                ondelete="CASCADE",
                name=op.f("fk_asynctask_failed_item_event_id_asynctask_event"),
            ),
            nullable=False,
        ),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("item", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_asynctask_failed_item")),
        sa.UniqueConstraint("event_id", "position", name=op.f("uq_asynctask_failed_item_event_id_position")),
    )
    op.create_index(
        op.f("ix_asynctask_failed_item_task_id_event_id_position"),
        "asynctask_failed_item",
        ["task_id", "event_id", "position"],
    )


def downgrade() -> None:
    op.drop_index(
        op.f("ix_asynctask_failed_item_task_id_event_id_position"), table_name="asynctask_failed_item"
    )
    op.drop_table("asynctask_failed_item")
    with op.batch_alter_table("asynctask_event") as batch:
        for name in ("items_done", "items_failed"):
            batch.drop_column(name)
    with op.batch_alter_table("asynctask_task") as batch:
        for name in ("items", "items_done", "items_failed"):
            batch.drop_column(name)
