"""Capability requests that wait for the operator, for clients that cannot ask their human.

When a capability needs a human and the client cannot elicit (or its question was
dismissed unanswered), the request becomes a pending approval in the database, which the
server and the `airlock approvals` CLI (another process) share. The agent is told its id
and how long it waits; it collects the grant by calling request_capability again with
that id, in the same session (a collecting call waits up to `COLLECT_WAIT_S` for the
decision, released as soon as it is made). Nothing here grants anything, and nothing
here moves an approval but through `broker.approvals` (the state machine: a pending
approval expires refused, an approval counts once); this module checks it is the asking
session's and says to the agent what the move found. An approval counts only for the
session that asked; a session has at most `[broker] max_pending_approvals_per_session`
waiting at once, and all sessions of a tenant at most `max_pending_approvals_per_tenant`.
"""

from __future__ import annotations

from airlock.broker import approvals
from airlock.errors import (
    ApprovalPending,
    CapabilityDenied,
    InvalidRequest,
    NotFound,
    QuotaExceeded,
)
from airlock.ids import new_id
from airlock.store import ApprovalRecord

from .context import Services, Session, iso_time
from .events import CapabilityDecided
from .fleet import wait_for_decision

COLLECT_WAIT_S = 10.0
"""How long a request collecting a still-pending approval waits for the decision before
answering that it still waits; a decision made meanwhile, on any server of a fleet or with
`airlock approvals`, answers it at once."""


def _pending_message(record: ApprovalRecord, now: float) -> str:
    wait = max(0, int(record.expires_at - now))
    return (
        f"capability {record.capability!r} needs a human's approval and this client cannot "
        f"ask its user, so the request waits for the operator as approval {record.id}: they "
        f"decide with `airlock approvals approve {record.id}` (or `deny`). It waits until "
        f"{iso_time(record.expires_at)} ({wait} s more), then expires refused. Call "
        f'request_capability again with approval_id="{record.id}" and '
        f'session_id="{record.session_id}" to collect the capability once approved; the '
        "approval is valid only in this session."
    )


async def wait_for_operator(
    services: Services,
    session: Session,
    capability: str,
    params: dict[str, str],
    ttl: int,
    reason: str,
) -> None:
    """Record the request as pending and tell the agent so (raises ApprovalPending), or
    raise QuotaExceeded when the session already has as many waiting as its policy allows."""
    record = await record_pending(services, session, capability, params, ttl, reason)
    raise ApprovalPending(record.id, _pending_message(record, services.clock()))


async def record_pending(
    services: Services,
    session: Session,
    capability: str,
    params: dict[str, str],
    ttl: int,
    reason: str,
) -> ApprovalRecord:
    """Record the request as pending for the operator; raises QuotaExceeded when the
    session (or tenant) already has as many waiting as its policy allows."""
    now = services.clock()
    broker = services.policy_for(session.tenant).broker
    record = ApprovalRecord(
        id=new_id("apr_", random_bytes=10),
        tenant=session.tenant,
        session_id=session.id,
        capability=capability,
        params=dict(params),
        ttl_s=ttl,
        reason=reason,
        status="pending",
        created_at=now,
        expires_at=now + broker.approval_wait_s,
    )
    refused = await services.db.create_approval(
        record,
        max_pending=broker.max_pending_approvals_per_session,
        max_pending_tenant=broker.max_pending_approvals_per_tenant,
    )
    if refused is not None:
        who, cap = (
            ("session", "max_pending_approvals_per_session")
            if refused == "session"
            else ("tenant", "max_pending_approvals_per_tenant")
        )
        most = getattr(broker, cap)
        raise QuotaExceeded(
            cap,
            most,
            f"this {who} already has {most} capability requests waiting for the operator, "
            f"the most allowed ([broker] {cap} = {most}); nothing "
            "new was recorded. Wait until the operator decides one (collect it with "
            "request_capability and its approval_id) or one expires (each waits at most "
            f"{broker.approval_wait_s} s), or ask the operator to decide them with "
            "`airlock approvals list`.",
        )
    return record


async def approved_request(
    services: Services, session: Session, approval_id: str, capability: str
) -> ApprovalRecord:
    """The approval `approval_id` of this session, claimed for one grant; raises what
    the agent must know when it is still pending, refused, expired or used."""
    record = await services.db.get_approval(approval_id)
    if record is None or record.tenant != session.tenant or record.session_id != session.id:
        raise NotFound(
            f"unknown approval {approval_id!r} in this session; an approval is valid only in "
            "the session that asked (pass that session_id)"
        )
    if record.capability != capability:
        raise InvalidRequest(
            f"approval {approval_id} is for capability {record.capability!r}, not {capability!r}"
        )
    now = services.clock()
    if record.status == "pending" and record.expires_at > now:
        # The operator may be deciding right now: answer that decision, not a poll later.
        waited = await wait_for_decision(
            services.notices,
            lambda: services.db.get_approval(approval_id),
            approval_id,
            wait_s=min(COLLECT_WAIT_S, record.expires_at - now),
        )
        record = waited or record
        now = services.clock()
    claimed = await approvals.claim(services.db, record, now=now)
    if claimed == "expired":
        await expire_pending(services)
    match claimed:
        case "claimed":
            return record
        case "pending":
            raise ApprovalPending(record.id, _pending_message(record, now))
        case "denied":
            raise CapabilityDenied(f"the operator denied approval {approval_id} ({capability!r})")
        case "expired":
            raise CapabilityDenied(
                f"approval {approval_id} expired without a decision; request the capability again"
            )
        case "used":
            raise CapabilityDenied(
                f"approval {approval_id} was already used for a capability; request a new one"
            )


async def expire_pending(services: Services, *, session_id: str | None = None) -> int:
    """Expire pending approvals past their wait (or all of an ended session); audited."""
    expired = await approvals.expire(services.db, now=services.clock(), session_id=session_id)
    for record in expired:
        services.events.emit(
            CapabilityDecided(
                tenant=record.tenant,
                session_id=record.session_id,
                capability=record.capability,
                outcome="denied",
                approval_id=record.id,
                reason="the approval expired without a decision"
                if session_id is None
                else "the session that asked ended",
            )
        )
    return len(expired)
