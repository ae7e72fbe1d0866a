"""Sessions that branch: a session forked from another (`fork_session`) names its parent
and the workspace version it started at (`parent_id`, `parent_version`; both NULL for a
session started afresh).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.types import TypeEngine

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen here, as in 0001: a migration never follows later changes of store/schema.py.
Count: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column("sessions", sa.Column("parent_id", sa.Text()))
    op.add_column("sessions", sa.Column("parent_version", Count))
