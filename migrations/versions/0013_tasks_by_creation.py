"""Every tenant's tasks, newest first: an index on asynctask_task (created_at, id).

Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"


def upgrade() -> None:
    # The operators' task list pages through all tenants by (created_at, id): without this index
    # each page would sort the whole table.
    op.create_index(op.f("ix_asynctask_task_created_at_id"), "asynctask_task", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_asynctask_task_created_at_id"), table_name="asynctask_task")
