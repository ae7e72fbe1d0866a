"""request_capability and revoke_capability: the agent asks, the policy (and maybe a human) decides.

A grant is a lease in the broker, bound to the caller's session; the agent gets
its id and resolved scope, never a secret and never a token.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, cast, get_args

from airlock.broker import ApprovedBy, Grant, approvals
from airlock.errors import (
    AirlockError,
    ApprovalPending,
    CapabilityDenied,
    InvalidRequest,
    LimitExceeded,
    NotFound,
    QuotaExceeded,
)
from airlock.policies import Capability, Policy, Scope, resolve_scope
from airlock.store import GrantRecord, GrantRevoked

from .approvals import approved_request, record_pending, wait_for_operator
from .context import Services, Session, iso_time
from .events import CapabilityDecided
from .models import CapabilityResult, RevokeResult

# The broker's quota names (QuotaExceeded.quota) and the policy fields that set them.
_RECORDED_QUOTAS = {
    "max_per_session": "max_capabilities_per_session",
    "max_live_per_tenant": "max_live_grants_per_tenant",
}

# Longer than any grant id (`tenant/<t>/session/<s>/cap/<id>`): an error quotes only this
# much of what the caller passed.
MAX_SHOWN_ID_CHARS = 200

# How the human answered, as the server learnt it from elicitation.
Approval = Literal["approved", "declined", "cancelled", "unsupported", "not_asked"]


def describe_offer(policy: Policy, *, per_tenant: bool = False) -> str:
    """The capabilities the policy offers, for the tool description.

    With per-tenant policies the description is the same for every caller, so it names
    none: listing the server's (or any tenant's) offer would show it to every tenant.
    """
    if per_tenant:
        return (
            "Which capabilities you may request depends on your tenant's policy; a request "
            "for a name it does not offer is refused with the names it does offer."
        )
    caps = policy.capabilities
    if not caps:
        return "This server's policy offers no capabilities."
    lines = ["Capabilities this server's policy offers:"]
    for name, cap in sorted(caps.items()):
        params = ", ".join(sorted(cap.params)) or "none"
        lines.append(
            f"- {name}: {cap.description or 'no description'} (hosts {', '.join(cap.hosts)}; "
            f"params: {params}; approval: {cap.approval})"
        )
    return "\n".join(lines)


def approval_question(
    cap_name: str, cap: Capability, params: dict[str, str], reason: str, ttl: int
) -> str:
    filled = ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "no parameters"
    return (
        f"An agent asks for capability '{cap_name}' ({cap.description or 'no description'}) "
        f"with {filled}: {', '.join(cap.methods) or 'any traffic'} to {', '.join(cap.hosts)}, "
        f"for {ttl} seconds. The agent's stated reason: {reason!r}. Allow it?"
    )


class Checked(NamedTuple):
    """A request the tenant's policy could grant as asked: the capability, the scope
    resolved from the request's params (once, here) and the grant's lifetime."""

    capability: Capability
    scope: Scope
    ttl: int


def check_request(
    services: Services, tenant: str, capability: str, params: dict[str, str], ttl_s: int | None
) -> Checked:
    """What the tenant's policy would grant for this request; checked in full before any
    human is asked."""
    offer = services.policy_for(tenant).capabilities
    cap = offer.get(capability)
    if cap is None:
        offered = ", ".join(sorted(offer)) or "none"
        raise NotFound(f"unknown capability {capability!r}; this server offers: {offered}")
    if cap.approval == "deny":
        raise CapabilityDenied(f"the policy denies capability {capability!r}; ask the operator")
    try:
        scope = resolve_scope(cap, params)
    except ValueError as exc:
        raise InvalidRequest(f"capability {capability!r}: {exc}") from exc
    ttl = cap.ttl if ttl_s is None else ttl_s
    if ttl < 1:
        raise InvalidRequest("ttl_s must be at least 1 second")
    if ttl > cap.max_ttl:
        raise LimitExceeded(
            f"ttl_s={ttl} is above the maximum of {cap.max_ttl} s for {capability!r}; ask for less"
        )
    return Checked(cap, scope, ttl)


async def request_capability(
    services: Services,
    session: Session,
    *,
    capability: str,
    params: dict[str, str],
    ttl_s: int | None,
    reason: str,
    approval: Approval,
    approval_id: str | None = None,
) -> CapabilityResult:
    try:
        if approval_id is not None:
            result = await _redeem(services, session, approval_id, capability)
        else:
            result = await _decide(
                services,
                session,
                capability=capability,
                params=params,
                ttl_s=ttl_s,
                reason=reason,
                approval=approval,
            )
    except ApprovalPending as exc:
        _note_pending(services, session, capability, exc.approval_id)
        raise
    except AirlockError as exc:
        services.events.emit(
            CapabilityDecided(
                tenant=session.tenant,
                session_id=session.id,
                capability=capability,
                outcome="denied",
                reason=str(exc),
            )
        )
        raise
    services.events.emit(
        CapabilityDecided(
            tenant=session.tenant,
            session_id=session.id,
            capability=capability,
            outcome="granted",
            approved_by=result.approved_by,
            capability_id=result.capability_id,
        )
    )
    return result


async def ask_operator_too(
    services: Services,
    session: Session,
    *,
    capability: str,
    params: dict[str, str],
    ttl_s: int | None,
    reason: str,
) -> str:
    """Record a request that is asking the client's human (an MCP task waiting on its
    client) as pending for the operator too, so that either may answer; the approval's
    id. Raises what `check_request` and the pending quotas raise."""
    checked = check_request(services, session.tenant, capability, params, ttl_s)
    record = await record_pending(services, session, capability, params, checked.ttl, reason)
    _note_pending(services, session, capability, record.id)
    return record.id


def _note_pending(services: Services, session: Session, capability: str, approval_id: str) -> None:
    """Audit a request left waiting for the operator as `approval_id`."""
    services.events.emit(
        CapabilityDecided(
            tenant=session.tenant,
            session_id=session.id,
            capability=capability,
            outcome="pending",
            approval_id=approval_id,
        )
    )


async def _decide(
    services: Services,
    session: Session,
    *,
    capability: str,
    params: dict[str, str],
    ttl_s: int | None,
    reason: str,
    approval: Approval,
) -> CapabilityResult:
    checked = check_request(services, session.tenant, capability, params, ttl_s)
    ttl = checked.ttl
    approved_by: ApprovedBy = "policy"
    if checked.capability.approval == "ask":
        if approval in ("unsupported", "cancelled"):
            # No human answered (the client cannot ask, or dismissed the question): the
            # operator decides instead. An explicit "no" below stays a denial.
            await wait_for_operator(services, session, capability, params, ttl, reason)
        if approval != "approved":
            raise CapabilityDenied(f"the user did not approve capability {capability!r}")
        approved_by = "user"
    return await _grant(services, session, capability, checked, params, reason, approved_by)


async def _redeem(
    services: Services, session: Session, approval_id: str, capability: str
) -> CapabilityResult:
    """The grant an operator approved for this session, once."""
    record = await approved_request(services, session, approval_id, capability)
    try:
        checked = check_request(services, session.tenant, capability, record.params, record.ttl_s)
        result = await _grant(
            services, session, capability, checked, record.params, record.reason, "operator"
        )
    except AirlockError:
        # Not granted (a quota, or the policy changed meanwhile): the approval stays usable.
        await approvals.release(services.db, approval_id, now=services.clock())
        raise
    await approvals.record_grant(
        services.db, approval_id, result.capability_id, now=services.clock()
    )
    return result


async def _grant(
    services: Services,
    session: Session,
    capability: str,
    checked: Checked,
    params: dict[str, str],
    reason: str,
    approved_by: ApprovedBy,
) -> CapabilityResult:
    broker = services.policy_for(session.tenant).broker
    grant = services.grants.grant(
        checked.capability,
        checked.scope,
        name=capability,
        params=dict(params),
        tenant=session.tenant,
        session_id=session.id,
        approved_by=approved_by,
        reason=reason,
        ttl_s=checked.ttl,
        now=services.clock(),
        # The tenant's own quotas: the store has none of its own.
        max_per_session=broker.max_capabilities_per_session,
        max_live_per_tenant=broker.max_live_grants_per_tenant,
    )
    # The records count every server's grants: the broker's quota above counts this one's.
    refused = await services.db.record_grant(
        _record(grant),
        max_per_session=broker.max_capabilities_per_session,
        max_live_per_tenant=broker.max_live_grants_per_tenant,
    )
    if refused is not None:
        services.grants.revoke_ids([grant.id], now=services.clock())
        most = getattr(broker, _RECORDED_QUOTAS[refused])
        raise QuotaExceeded(
            refused,
            most,
            f"this {'session' if refused == 'max_per_session' else 'tenant'} already holds "
            f"{most} live capabilities across the servers sharing these records, the most "
            f"allowed ({refused} = {most}); revoke one with revoke_capability or wait until "
            "one expires",
        )
    return CapabilityResult(
        capability_id=grant.id,
        capability=capability,
        scope=grant.scope,
        expires_at=iso_time(grant.expires_at),
        approved_by=approved_by,
        session_id=session.id,
        session_expires_at=session.expires_at_iso,
    )


async def revoke_capability(
    services: Services, session: Session, *, capability_id: str
) -> RevokeResult:
    now = services.clock()
    # A grant another server of the fleet made is held here first, so it can be revoked.
    await held_grant(services, session, capability_id)
    grant = services.grants.revoke(
        capability_id, tenant=session.tenant, session_id=session.id, now=now
    )
    if grant is None:
        raise NotFound(f"unknown capability id {capability_id!r} in this session")
    await services.db.mark_grants_revoked([grant.id], at=now)
    # Recorded first: the other servers of a fleet cut its tunnels when they hear.
    await services.notices.publish(GrantRevoked(tenant=session.tenant, grant_ids=(grant.id,)))
    return RevokeResult(
        capability_id=grant.id,
        revoked=True,
        session_id=session.id,
        session_expires_at=session.expires_at_iso,
    )


async def live_grants(
    services: Services, session: Session, capability_ids: list[str]
) -> list[Grant]:
    """The grants a run asked for, each live and of the caller's session."""
    grants = []
    for capability_id in dict.fromkeys(capability_ids):
        grant = await held_grant(services, session, capability_id)
        if grant is None:
            raise NotFound(
                f"capability {_shown_id(capability_id)} is unknown, expired or revoked in this "
                "session; request it again with request_capability"
            )
        grants.append(grant)
    return grants


def _shown_id(capability_id: str) -> str:
    """The id as an error quotes it: whole when it could be one of ours, else its start."""
    if len(capability_id) <= MAX_SHOWN_ID_CHARS:
        return repr(capability_id)
    shown = capability_id[:MAX_SHOWN_ID_CHARS]
    return f"{shown!r} (the first {MAX_SHOWN_ID_CHARS} of {len(capability_id)} characters)"


async def held_grant(services: Services, session: Session, capability_id: str) -> Grant | None:
    """The live grant `capability_id` of the caller's session: held here, or granted by
    another server of the fleet (its record), then held here from the policy's capability
    as it stands now. None when unknown, another session's, ended, or no longer what the
    policy would grant (its capability removed, or its scope narrowed since)."""
    now = services.clock()
    held = services.grants.get(capability_id, tenant=session.tenant, session_id=session.id, now=now)
    if held is not None:
        return held
    record = await services.db.get_grant(capability_id)
    if (
        record is None
        or record.tenant != session.tenant
        or record.session_id != session.id
        or record.revoked_at is not None
        or now >= record.expires_at
        or record.approved_by not in get_args(ApprovedBy)
    ):
        return None
    capability = services.policy_for(session.tenant).capabilities.get(record.capability)
    if capability is None:
        return None
    try:
        scope = resolve_scope(capability, dict(record.params))
    except AirlockError:
        return None
    if scope.model_dump(mode="json") != record.scope:
        return None
    adopted = services.grants.adopt(
        capability,
        scope,
        grant_id=record.id,
        name=record.capability,
        params=dict(record.params),
        tenant=record.tenant,
        session_id=record.session_id,
        approved_by=cast(ApprovedBy, record.approved_by),
        reason=record.reason,
        created_at=record.created_at,
        expires_at=record.expires_at,
    )
    # One held here already (revoked or ended here) stays what it is.
    return adopted if adopted.live(now) else None


def _record(grant: Grant) -> GrantRecord:
    return GrantRecord(
        id=grant.id,
        tenant=grant.tenant,
        session_id=grant.session_id,
        capability=grant.capability,
        params=dict(grant.params),
        scope=grant.scope.model_dump(mode="json"),
        approved_by=grant.approved_by,
        reason=grant.reason,
        created_at=grant.created_at,
        expires_at=grant.expires_at,
    )
