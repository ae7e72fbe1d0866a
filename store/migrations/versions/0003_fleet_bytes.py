"""A fleet's shared bytes (blob contents in chunks, named documents: the vault) and its
replicas' claims (`airlock_instances`).

A fleet's replicas read the blobs and the vault any replica wrote, so on PostgreSQL they
live here (`store/postgres/blobs.py`, `store/postgres/documents.py`); a single server keeps them as
files under its data dir, and on SQLite these tables stay empty.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.types import TypeEngine

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen here, as in 0001: a migration never follows later changes of store/schema.py.
Seconds: TypeEngine[float] = sa.Double().with_variant(sa.REAL(), "sqlite")
Count: TypeEngine[int] = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "blob_contents",
        sa.Column("sha256", sa.Text(), primary_key=True),
        sa.Column("size", Count, nullable=False),
        sa.Column("chunk_bytes", Count, nullable=False),
    )
    op.create_table(
        "blob_chunks",
        sa.Column("sha256", sa.Text(), primary_key=True),
        sa.Column("seq", Count, primary_key=True, autoincrement=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )
    op.create_table(
        "documents",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("body", sa.LargeBinary()),
        sa.Column("updated_at", Seconds),
    )
    op.create_table(
        "airlock_instances",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("lock_key", sa.BigInteger(), nullable=False),
        sa.Column("claimed_at", Seconds, nullable=False),
    )
