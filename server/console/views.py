"""What the console's pages show of a record: rows of plain strings for the templates.

Every value here is a string (or a number) that the templates print through Jinja's
autoescaping and the environment's `finalize` (`app.visible`), so none of it needs marking
here: a `Block` is text of several lines (code, output) that keeps its newlines and tabs.
Nothing in this module writes markup, reads a request or touches a cookie. Times are the
CLI's (`iso_time`), and so are the refusal sentences (`server.approvals`).
"""

from __future__ import annotations

from dataclasses import dataclass

from airlock.policies import Policy, format_duration
from airlock.policies.capabilities import resolve_scope
from airlock.store import (
    ApprovalRecord,
    ArtifactRecord,
    EgressRecord,
    GrantRecord,
    ReplicaRecord,
    RunRecord,
    SessionRecord,
)
from airlock.tools.context import iso_time

from ..audit import cpu_text, duration_text, memory_text


class Block(str):
    """Text of several lines from a run or a page: shown with its newlines and tabs, every
    other control or invisible character written as `<U+XXXX>` (`terminal.safe_block`)."""

    __slots__ = ()


def waited(seconds: float) -> str:
    """A wait in the largest sensible unit, such as "3 min" or "2 h 5 min"."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes = whole // 60
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


@dataclass(frozen=True)
class ApprovalRow:
    id: str
    tenant: str
    session_id: str
    capability: str
    params: str
    scope: str
    methods: str
    paths: str
    ttl: str
    rule: str
    reason: str
    status: str
    requested: str
    waited: str
    waits_until: str
    decided: str


def approval_row(record: ApprovalRecord, policy: Policy, now: float, source: str) -> ApprovalRow:
    """`record` as a row; `policy` is its tenant's, named `source` ("the server's policy")."""
    cap = policy.capabilities.get(record.capability)
    scope, methods, paths = "-", "-", "-"
    if cap is None:
        rule = f"capability {record.capability} is no longer in {source}"
    else:
        rule = f'[capabilities.{record.capability}] approval = "{cap.approval}" in {source}'
        try:
            resolved = resolve_scope(cap, record.params)
        except ValueError as exc:
            scope = f"does not resolve under the policy now: {exc}"
        else:
            ports = ",".join(str(p) for p in resolved.ports)
            scope = " ".join(f"{host}:{ports}" for host in resolved.hosts)
            methods, paths = " ".join(resolved.methods), " ".join(resolved.paths)
    decided = "-"
    if record.decided_at is not None:
        decided = f"{record.status} by {record.decided_by or '-'} at {iso_time(record.decided_at)}"
    return ApprovalRow(
        id=record.id,
        tenant=record.tenant,
        session_id=record.session_id,
        capability=record.capability,
        params=", ".join(f"{k}={v}" for k, v in sorted(record.params.items())),
        scope=scope,
        methods=methods,
        paths=paths,
        ttl=format_duration(record.ttl_s),
        rule=rule,
        reason=record.reason,
        status=record.status,
        requested=iso_time(record.created_at),
        waited=waited((record.decided_at or now) - record.created_at),
        waits_until=iso_time(record.expires_at),
        decided=decided,
    )


@dataclass(frozen=True)
class SessionRow:
    id: str
    tenant: str
    started: str
    last_used: str
    expires: str
    ended: str


def session_row(record: SessionRecord) -> SessionRow:
    ended = "-"
    if record.ended_at is not None:
        ended = f"{iso_time(record.ended_at)} ({record.end_reason or 'no reason recorded'})"
    return SessionRow(
        id=record.id,
        tenant=record.tenant,
        started=iso_time(record.created_at),
        last_used=iso_time(record.last_used_at),
        expires=iso_time(record.expires_at),
        ended=ended,
    )


@dataclass(frozen=True)
class RunRow:
    id: str
    session_id: str
    tenant: str
    kind: str
    status: str
    exit_code: str
    started: str
    duration: str
    cpu: str
    memory: str
    runtime: str
    timeout: str
    error: str


def run_row(run: RunRecord) -> RunRow:
    return RunRow(
        id=run.id,
        session_id=run.session_id,
        tenant=run.tenant,
        kind=run.language,
        status=run.status,
        exit_code="-" if run.exit_code is None else str(run.exit_code),
        started=iso_time(run.created_at),
        duration=duration_text(run),
        cpu=cpu_text(run),
        memory=memory_text(run),
        runtime=run.runtime or "-",
        timeout=f"{run.timeout_s}s",
        error=run.error or "",
    )


@dataclass(frozen=True)
class EgressRow:
    time: str
    method: str
    host: str
    port: int
    path: str
    decision: str
    status: int
    rule: str
    bytes_out: int
    bytes_in: int
    reason: str


def egress_row(record: EgressRecord) -> EgressRow:
    injected = f" [injected {', '.join(record.injected)}]" if record.injected else ""
    return EgressRow(
        time=iso_time(record.time),
        method=record.method,
        host=record.host,
        port=record.port,
        path=record.path,
        decision=record.decision,
        status=record.status,
        rule=record.capability or "-",
        bytes_out=record.bytes_out,
        bytes_in=record.bytes_in,
        reason=record.reason + injected,
    )


@dataclass(frozen=True)
class ArtifactRow:
    path: str
    size: int
    mime_type: str
    sha256: str


def artifact_row(record: ArtifactRecord) -> ArtifactRow:
    return ArtifactRow(record.path, record.size, record.mime_type, record.sha256)


@dataclass(frozen=True)
class GrantRow:
    id: str
    capability: str
    params: str
    approved_by: str
    granted: str
    expires: str
    revoked: str
    reason: str


def grant_row(grant: GrantRecord) -> GrantRow:
    return GrantRow(
        id=grant.id,
        capability=grant.capability,
        params=", ".join(f"{k}={v}" for k, v in sorted(grant.params.items())) or "-",
        approved_by=grant.approved_by,
        granted=iso_time(grant.created_at),
        expires=iso_time(grant.expires_at),
        revoked=iso_time(grant.revoked_at) if grant.revoked_at else "-",
        reason=grant.reason,
    )


@dataclass(frozen=True)
class ReplicaRow:
    id: str
    this_one: bool
    claimed: str
    claim: str
    heartbeat: str


def replica_row(replica: ReplicaRecord, own_id: str, now: float) -> ReplicaRow:
    if replica.live:
        claim = f"held (PostgreSQL backend {replica.holder_pid})"
    else:
        claim = "free: the replica died and a live one will end its runs"
    heartbeat = "-"
    if replica.last_heartbeat is not None:
        ago = waited(now - replica.last_heartbeat)
        heartbeat = f"{iso_time(replica.last_heartbeat)} ({ago} ago)"
    return ReplicaRow(
        id=replica.id,
        this_one=replica.id == own_id,
        claimed=iso_time(replica.claimed_at),
        claim=claim,
        heartbeat=heartbeat,
    )
