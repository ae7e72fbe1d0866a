"""Fencing tokens of a fleet's claims: each taking of a replica's claim gets a new epoch
(`airlock_instances.epoch`, drawn from the sequence `airlock_claim_epochs`, which never
gives one twice), and a run records the epoch its owner held when it started
(`runs.claim_epoch`), so a run's end and its workspace commit are written only while that
claim is still the current one (`store/fleet/pg_claims.py`, `queries/runs.py`). 0 means no epoch:
the runs of one server on SQLite, and those recorded before this revision.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.types import TypeEngine

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen here, as in 0001: a migration never follows later changes of store/schema.py.
Count: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column(
        "airlock_instances", sa.Column("epoch", Count, nullable=False, server_default="0")
    )
    op.add_column("runs", sa.Column("claim_epoch", Count, nullable=False, server_default="0"))
    if op.get_bind().dialect.name == "postgresql":
        # SQLite's claims are flocks (`fleet/claims.py`): nothing there draws an epoch.
        op.execute("CREATE SEQUENCE airlock_claim_epochs")
