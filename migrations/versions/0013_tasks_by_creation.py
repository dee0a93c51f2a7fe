"""Every tenant's tasks, newest first: an index on asynctask_task (created_at, id).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The operators' task list pages through all tenants by (created_at, id): without this index
    # each page would sort the whole table.
    op.create_index(op.f("ix_asynctask_task_created_at_id"), "asynctask_task", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_asynctask_task_created_at_id"), table_name="asynctask_task")
