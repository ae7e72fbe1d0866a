"""Records to rows and back: JSON columns (`<name>_json`) for the fields that are lists or
mappings, and `WHERE` clauses of the filters a caller set. Rows reach pydantic as plain
dicts: it validates a dict faster than SQLAlchemy's row mapping."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ColumnElement, Connection, Table, and_, text, true

from ..records import RunRecord


def json_fields(params: dict[str, Any], *names: str) -> dict[str, Any]:
    """Store the model fields `names` as `<name>_json` columns."""
    for name in names:
        params[f"{name}_json"] = json.dumps(params.pop(name), sort_keys=True)
    return params


def from_json_fields(row: Mapping[Any, Any], *names: str) -> dict[str, Any]:
    fields = dict(row)
    for name in names:
        fields[name] = json.loads(fields.pop(f"{name}_json"))
    return fields


def run_params(rec: RunRecord) -> dict[str, Any]:
    return json_fields(rec.model_dump(), "limits")


def run_from_row(row: Mapping[Any, Any]) -> RunRecord:
    return RunRecord.model_validate(from_json_fields(row, "limits"))


def matching(table: Table, filters: Mapping[str, Any]) -> ColumnElement[bool]:
    """Equality with every filter that is set (None: not filtered on)."""
    chosen = [table.c[name] == value for name, value in filters.items() if value is not None]
    return and_(true(), *chosen)


def record_columns(table: Table, *, without: tuple[str, ...] = ("seq",)) -> list[Any]:
    """The columns a record is read from: all but the store's own bookkeeping."""
    return [c for c in table.c if c.name not in without]


_TENANT_LOCK = text(
    "SELECT pg_advisory_xact_lock(hashtextextended('airlock-quota:' || :tenant, 0))"
)


def lock_tenant(conn: Connection, tenant: str) -> None:
    """Hold `tenant`'s quota lock until the transaction ends, so servers counting and
    inserting that tenant's runs or grants take turns (other tenants are not held up).
    SQLite needs none: its writing transactions already take the database's one lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(_TENANT_LOCK, {"tenant": tenant})
