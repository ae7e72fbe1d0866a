"""Egress decisions, capability grants, approvals and drills: what the audit reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    and_,
    bindparam,
    exists,
    func,
    insert,
    select,
    true,
    update,
)

from ..records import (
    PROXY_CHALLENGE,
    ApprovalRecord,
    DrillRecord,
    EgressCount,
    EgressRecord,
    GrantRecord,
)
from ..schema import approvals, drills, egress_log, grants
from .rows import from_json_fields, json_fields, lock_tenant, matching, record_columns

_INSERT_EGRESS = insert(egress_log)
_EGRESS_COLUMNS = record_columns(egress_log)
_INSERT_GRANT = insert(grants)
_REVOKE_GRANT = (
    update(grants)
    .where(grants.c.id == bindparam("grant_id"), grants.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("at"))
)
_INSERT_APPROVAL = insert(approvals)
_GET_APPROVAL = select(*approvals.c).where(approvals.c.id == bindparam("id"))
_INSERT_DRILL = insert(drills)


def add_egress(conn: Connection, records: Sequence[EgressRecord]) -> None:
    params = [json_fields(rec.model_dump(), "injected") for rec in records]
    if params:
        conn.execute(_INSERT_EGRESS, params)


def list_egress(conn: Connection, filters: dict[str, str | None], limit: int) -> list[EgressRecord]:
    """The last `limit` decisions matching `filters`, oldest first."""
    latest = (
        select(*egress_log.c)
        .where(matching(egress_log, filters))
        .order_by(egress_log.c.seq.desc())
        .limit(limit)
        .subquery()
    )
    query = select(*[latest.c[c.name] for c in _EGRESS_COLUMNS]).order_by(latest.c.seq)
    rows = conn.execute(query).mappings()
    return [EgressRecord.model_validate(from_json_fields(row, "injected")) for row in rows]


def _tenants(tenant: str | None, except_tenant: str | None) -> ColumnElement[bool]:
    chosen = []
    if tenant is not None:
        chosen.append(egress_log.c.tenant == tenant)
    if except_tenant is not None:
        chosen.append(egress_log.c.tenant != except_tenant)
    return and_(true(), *chosen)


def _answered_challenge() -> ColumnElement[bool]:
    """A 407 (no valid run token) that the same run answered: a later request of it to the
    same destination got past the token check. Chromium, like any browser, asks without
    credentials first and sends the token on the challenge; that is not a denial."""
    answer = egress_log.alias("answer")
    later = exists().where(
        answer.c.run_id == egress_log.c.run_id,
        answer.c.host == egress_log.c.host,
        answer.c.port == egress_log.c.port,
        answer.c.seq > egress_log.c.seq,
        answer.c.status != PROXY_CHALLENGE,
    )
    return and_(egress_log.c.status == PROXY_CHALLENGE, later)


def egress_counts(
    conn: Connection, *, since: float, tenant: str | None, except_tenant: str | None
) -> list[EgressCount]:
    """Decisions summed by rule, verdict and destination; answered proxy challenges left
    out (`_answered_challenge`)."""
    group = (egress_log.c.capability, egress_log.c.decision, egress_log.c.host, egress_log.c.port)
    # Windows rather than GROUP BY: `reason` is the latest decision's of each group, which
    # only SQLite would take from a bare column next to max(); PostgreSQL refuses that.
    ranked = (
        select(
            egress_log.c.capability.label("rule"),
            egress_log.c.decision,
            egress_log.c.host,
            egress_log.c.port,
            egress_log.c.reason,
            func.count().over(partition_by=group).label("count"),
            func.max(egress_log.c.time).over(partition_by=group).label("last_time"),
            func.row_number()
            .over(partition_by=group, order_by=(egress_log.c.time.desc(), egress_log.c.seq.desc()))
            .label("rank"),
        )
        .where(
            egress_log.c.time >= since,
            _tenants(tenant, except_tenant),
            ~_answered_challenge(),
        )
        .subquery()
    )
    query = (
        select(ranked.c.rule, ranked.c.decision, ranked.c.host, ranked.c.port)
        .add_columns(ranked.c["count"], ranked.c.last_time, ranked.c.reason)
        .where(ranked.c.rank == 1)
        .order_by(
            ranked.c["count"].desc(),
            ranked.c.host,
            ranked.c.port,
            ranked.c.decision,
            # Spelled out: SQLite and PostgreSQL sort NULL at opposite ends by default.
            ranked.c.rule.nulls_first(),
        )
    )
    return [EgressCount.model_validate(dict(row)) for row in conn.execute(query).mappings()]


def last_egress_use(
    conn: Connection, *, tenant: str | None, except_tenant: str | None
) -> dict[str, float]:
    query = (
        select(egress_log.c.capability, func.max(egress_log.c.time))
        .where(
            egress_log.c.decision != "deny",
            egress_log.c.capability.is_not(None),
            _tenants(tenant, except_tenant),
        )
        .group_by(egress_log.c.capability)
    )
    return {str(rule): float(last) for rule, last in conn.execute(query)}


def record_grant(
    conn: Connection,
    rec: GrantRecord,
    *,
    max_per_session: int | None = None,
    max_live_per_tenant: int | None = None,
) -> str | None:
    """Insert `rec` unless a quota of live grants at `rec.created_at` is full (counted under
    the tenant's quota lock); the quota that refused it, or None."""
    if max_per_session is not None or max_live_per_tenant is not None:
        lock_tenant(conn, rec.tenant)
    live = (
        select(func.count())
        .select_from(grants)
        .where(
            grants.c.tenant == rec.tenant,
            grants.c.revoked_at.is_(None),
            grants.c.expires_at > rec.created_at,
        )
    )
    if max_per_session is not None:
        mine = conn.execute(live.where(grants.c.session_id == rec.session_id)).scalar_one()
        if mine >= max_per_session:
            return "max_per_session"
    if max_live_per_tenant is not None and conn.execute(live).scalar_one() >= max_live_per_tenant:
        return "max_live_per_tenant"
    conn.execute(_INSERT_GRANT, json_fields(rec.model_dump(), "params", "scope"))
    return None


def revoked_grants(conn: Connection, grant_ids: Sequence[str]) -> set[str]:
    query = select(grants.c.id).where(
        grants.c.id.in_(bindparam("ids", expanding=True)), grants.c.revoked_at.is_not(None)
    )
    found: set[str] = set()
    # SQLite takes at most 999 parameters in a statement by default.
    for start in range(0, len(grant_ids), 500):
        found.update(conn.execute(query, {"ids": list(grant_ids[start : start + 500])}).scalars())
    return found


def mark_grants_revoked(conn: Connection, grant_ids: Sequence[str], *, at: float) -> None:
    if grant_ids:
        conn.execute(_REVOKE_GRANT, [{"grant_id": g, "at": at} for g in grant_ids])


def get_grant(conn: Connection, grant_id: str) -> GrantRecord | None:
    row = conn.execute(select(*grants.c).where(grants.c.id == grant_id)).mappings().first()
    return (
        None
        if row is None
        else GrantRecord.model_validate(from_json_fields(row, "params", "scope"))
    )


def list_grants(conn: Connection, filters: dict[str, str | None], limit: int) -> list[GrantRecord]:
    query = (
        select(*grants.c)
        .where(matching(grants, filters))
        .order_by(grants.c.created_at.desc(), grants.c.id)
        .limit(limit)
    )
    rows = conn.execute(query).mappings()
    return [GrantRecord.model_validate(from_json_fields(row, "params", "scope")) for row in rows]


def _pending(tenant: str, at: float) -> Any:
    return (
        select(func.count())
        .select_from(approvals)
        .where(
            approvals.c.tenant == tenant,
            approvals.c.status == "pending",
            approvals.c.expires_at > at,
        )
    )


def create_approval(
    conn: Connection, rec: ApprovalRecord, max_pending: int | None, max_pending_tenant: int | None
) -> str | None:
    """Insert `rec` unless a cap refuses it; the caller's transaction makes the count and
    the insert one step (SQLite: the write lock; PostgreSQL: SERIALIZABLE)."""
    if max_pending is not None:
        mine = _pending(rec.tenant, rec.created_at).where(approvals.c.session_id == rec.session_id)
        if conn.execute(mine).scalar_one() >= max_pending:
            return "session"
    if max_pending_tenant is not None:
        every = _pending(rec.tenant, rec.created_at)
        if conn.execute(every).scalar_one() >= max_pending_tenant:
            return "tenant"
    conn.execute(_INSERT_APPROVAL, json_fields(rec.model_dump(), "params"))
    return None


def _approval(row: Any) -> ApprovalRecord:
    return ApprovalRecord.model_validate(from_json_fields(row, "params"))


def get_approval(conn: Connection, approval_id: str) -> ApprovalRecord | None:
    row = conn.execute(_GET_APPROVAL, {"id": approval_id}).mappings().first()
    return _approval(row) if row is not None else None


def list_approvals(
    conn: Connection, filters: dict[str, str | None], limit: int, *, newest_first: bool = False
) -> list[ApprovalRecord]:
    order = (approvals.c.created_at, approvals.c.id)
    query = (
        select(*approvals.c)
        .where(matching(approvals, filters))
        .order_by(*(column.desc() for column in order) if newest_first else order)
        .limit(limit)
    )
    return [_approval(row) for row in conn.execute(query).mappings()]


def move_approval(
    conn: Connection,
    approval_id: str,
    *,
    from_status: str,
    to_status: str,
    at: float,
    by: str | None,
    grant_id: str | None,
    live_at: float | None,
) -> bool:
    where = [approvals.c.id == approval_id, approvals.c.status == from_status]
    if live_at is not None:
        where.append(approvals.c.expires_at > live_at)
    query = (
        update(approvals)
        .where(*where)
        .values(
            status=to_status,
            decided_at=func.coalesce(approvals.c.decided_at, at),
            decided_by=func.coalesce(by, approvals.c.decided_by),
            grant_id=func.coalesce(grant_id, approvals.c.grant_id),
        )
    )
    return bool(conn.execute(query).rowcount)


def expire_approvals(
    conn: Connection, *, now: float, session_id: str | None
) -> list[ApprovalRecord]:
    chosen = (
        approvals.c.session_id == session_id
        if session_id is not None
        else approvals.c.expires_at <= now
    )
    where = and_(approvals.c.status == "pending", chosen)
    # Locked as read (PostgreSQL), so exactly the rows returned are the rows expired.
    rows = conn.execute(select(*approvals.c).where(where).with_for_update()).mappings().all()
    ids = [row["id"] for row in rows]
    if ids:
        expired = update(approvals).where(approvals.c.id.in_(ids))
        conn.execute(expired.values(status="expired", decided_at=now))
    return [_approval(row) for row in rows]


def record_drill(conn: Connection, rec: DrillRecord) -> None:
    conn.execute(_INSERT_DRILL, json_fields(rec.model_dump(), "sessions", "rows"))


def list_drills(conn: Connection, limit: int) -> list[DrillRecord]:
    query = select(*drills.c).order_by(drills.c.started_at.desc(), drills.c.id).limit(limit)
    rows = conn.execute(query).mappings()
    return [DrillRecord.model_validate(from_json_fields(r, "sessions", "rows")) for r in rows]
