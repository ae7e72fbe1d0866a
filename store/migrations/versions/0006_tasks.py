"""Tool calls that outlive their answer as MCP tasks (`server/tasks`): one row a task, with
its owner (tenant and principal), the server instance running it, its run once one
started, and once ended the JSON-RPC result or error it came to, kept `ttl_s` past its end.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.types import TypeEngine

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen here, as in 0001: a migration never follows later changes of store/schema.py.
Seconds: TypeEngine[float] = sa.Double().with_variant(sa.REAL(), "sqlite")
Count: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
STATUSES = "'working', 'input_required', 'completed', 'failed', 'cancelled'"


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("tool", sa.Text(), nullable=False),
        sa.Column(
            "status", sa.Text(), sa.CheckConstraint(f"status IN ({STATUSES})"), nullable=False
        ),
        sa.Column("status_message", sa.Text()),
        sa.Column("created_at", Seconds, nullable=False),
        sa.Column("updated_at", Seconds, nullable=False),
        sa.Column("ended_at", Seconds),
        sa.Column("ttl_s", Count, nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text()),
        sa.Column("result_json", sa.Text()),
        sa.Column("error_json", sa.Text()),
        sa.Column("cancel_requested_at", Seconds),
        sa.Column("input_requests_json", sa.Text()),
        sa.Column("call_json", sa.Text()),
    )
    op.create_index("tasks_by_instance", "tasks", ["instance_id", "status"])
