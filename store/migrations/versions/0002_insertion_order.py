"""Runs and patches keep their insertion order in a column of their own, `seq`.

"Newest first" breaks ties of `created_at` (two runs within one clock tick) by insertion
order. The pre-Alembic code used SQLite's rowid, which PostgreSQL has no counterpart of:
there `seq` is an identity column (existing rows numbered as they are added); on SQLite it
starts as a copy of the rowid, and a trigger copies the rowid of every new row (SQLite
gives no other column an automatic number).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

_TABLES = ("runs", "hatch_patches")


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table in _TABLES:
        if sqlite:
            op.add_column(table, sa.Column("seq", sa.Integer()))
            op.execute(f"UPDATE {table} SET seq = rowid")
            op.execute(
                f"CREATE TRIGGER {table}_seq AFTER INSERT ON {table} WHEN NEW.seq IS NULL"
                f" BEGIN UPDATE {table} SET seq = NEW.rowid WHERE rowid = NEW.rowid; END"
            )
        else:
            op.add_column(table, sa.Column("seq", sa.BigInteger(), sa.Identity()))
