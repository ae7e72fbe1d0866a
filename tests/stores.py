"""Store tests' own access to a database, beside `Database`: raw SQL on SQLite or
PostgreSQL (to check what a call wrote), and databases as an older Airlock left them."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

SCHEMA_4 = Path(__file__).parent / "data" / "airlock-schema-4.sql"
"""A database written by Airlock's pre-Alembic store (schema 4, commit 1887fc6), dumped
with sqlite3's iterdump: a record of every kind (tests/data/README.md says how it was made)."""


def query(where: Path | str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """The rows of `sql` on the store `where` (a SQLite path or a PostgreSQL URL)."""
    if isinstance(where, Path):
        url = make_url(f"sqlite:///{where}")
    else:
        url = make_url(where).set(drivername="postgresql+psycopg")
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(sql), params)
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def old_database(path: Path, *, dump: Path = SCHEMA_4) -> Path:
    """Write the pre-Alembic database `dump` holds to `path`."""
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(dump.read_text())
    return path
