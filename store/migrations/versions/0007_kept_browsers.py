"""Kept browsers (`tools/kept_browsers.py`): one row a browser a session kept open, with the
server instance keeping it, when it opened, and when and why it closed; and one row a step,
naming the browse run that step was. The audit shows each browser with its runs; a fleet's
per-tenant cap counts the open rows of every replica.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.types import TypeEngine

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen here, as in 0001: a migration never follows later changes of store/schema.py.
Seconds: TypeEngine[float] = sa.Double().with_variant(sa.REAL(), "sqlite")
Count: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "kept_browsers",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("tenant", sa.Text(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("instance_id", sa.Text(), nullable=False),
        sa.Column("opened_at", Seconds, nullable=False),
        sa.Column("closed_at", Seconds),
        sa.Column("closed_why", sa.Text()),
    )
    op.create_index("kept_browsers_open", "kept_browsers", ["tenant", "closed_at"])
    op.create_index("kept_browsers_by_instance", "kept_browsers", ["instance_id", "closed_at"])
    op.create_table(
        "kept_browser_runs",
        sa.Column(
            "browser_id",
            sa.Text(),
            sa.ForeignKey("kept_browsers.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("step", Count, primary_key=True, autoincrement=False),
        sa.Column("run_id", sa.Text(), nullable=False),
    )
