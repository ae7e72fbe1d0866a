"""request_capability (with the resolver that asks the human through MCP elicitation) and
revoke_capability."""

# No `from __future__ import annotations`: the SDK reads these signatures (`__init__`).

import logging
from typing import Annotated, Any

from mcp.server.context import ServerRequestContext
from mcp.server.elicitation import AcceptedElicitation, CancelledElicitation, ElicitationResult
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resolve import Elicit, Resolve
from pydantic import BaseModel, Field, ValidationError

from airlock import tools
from airlock.errors import AirlockError
from airlock.tools import CapabilityResult, RevokeResult
from airlock.tools.capabilities import (
    approval_question,
    ask_operator_too,
    check_request,
    describe_offer,
)

from ..tasks.inputs import AskOperator, OperatorAsked
from .registry import AirlockContext, Registry, hints, running

log = logging.getLogger(__name__)

REQUEST_CAPABILITY_DOC = """\
Ask for scoped, expiring network access for your code. The policy (and, for some capabilities,
a human) decides. You get a capability_id to pass to run_code(capabilities=[...]); you never
see a secret or a token: the egress proxy adds credentials on the way out. If a human must
approve and your client cannot ask them, the request waits for the operator: the error names
an approval_id; call again with it (and the same session_id) to collect the capability."""


class ApprovalAnswer(BaseModel):
    """The human's answer to a capability request."""

    approve: bool = Field(description="Allow this access for the requested time?")


def register(registry: Registry) -> None:
    SessionArg = Annotated[str | None, registry.session_field]

    async def ask_user(
        capability: str,
        params: dict[str, str] | None,
        ttl_s: int | None,
        reason: str,
        approval_id: str | None,
        ctx: AirlockContext,
    ) -> Elicit[ApprovalAnswer] | ApprovalAnswer | str:
        """Ask the human, through MCP elicitation, when the capability needs approval."""
        if approval_id is not None:
            return "not_asked"  # the operator decided already (or will)
        try:
            checked = check_request(
                running(ctx).services, registry.caller(), capability, params or {}, ttl_s
            )
        except AirlockError:
            return "not_asked"  # the tool body reports the precise problem
        cap, ttl = checked.capability, checked.ttl
        if cap.approval != "ask":
            return "not_asked"
        capabilities = ctx.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return "unsupported"
        return Elicit(approval_question(capability, cap, params or {}, reason, ttl), ApprovalAnswer)

    @registry.mcp.tool(
        title="Ask for network access",
        description=REQUEST_CAPABILITY_DOC
        + "\n\n"
        + describe_offer(registry.policy, per_tenant=registry.per_tenant),
        annotations=hints(read_only=False, destructive=False, idempotent=False),
    )
    async def request_capability(
        capability: Annotated[str, Field(description="Name of a capability the policy offers.")],
        reason: Annotated[
            str, Field(max_length=500, description="Why you need it; shown to the human.")
        ],
        answer: Annotated[ElicitationResult[ApprovalAnswer], Resolve(ask_user)],
        params: Annotated[
            dict[str, str] | None,
            Field(description='Values for the capability\'s parameters, e.g. {"org": "acme"}.'),
        ] = None,
        ttl_s: Annotated[
            int | None, Field(description="Lifetime in seconds (default: the policy's ttl).")
        ] = None,
        approval_id: Annotated[
            str | None,
            Field(
                description="The approval_id an earlier request was told to wait on: collects "
                "the capability once the operator approved it (same session only); while "
                "still pending, the call waits up to 10 s for the decision."
            ),
        ] = None,
        session_id: SessionArg = None,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> CapabilityResult:
        async with registry.call(ctx, session_id) as call:
            return await tools.request_capability(
                call.services,
                call.session,
                capability=capability,
                params=params or {},
                ttl_s=ttl_s,
                reason=reason,
                approval=_approval(answer),
                approval_id=approval_id,
            )

    @registry.mcp.tool(
        title="Revoke network access",
        annotations=hints(read_only=False, destructive=True, idempotent=True),
    )
    async def revoke_capability(
        capability_id: Annotated[str, Field(description="capability_id to revoke.")],
        session_id: SessionArg = None,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> RevokeResult:
        """Revoke a capability now: every later request of any run using it is refused."""
        async with registry.call(ctx, session_id) as call:
            return await tools.revoke_capability(
                call.services, call.session, capability_id=capability_id
            )


class _Asked(BaseModel):
    """The request_capability arguments the operator's copy of a question needs."""

    capability: str
    reason: str
    params: dict[str, str] | None = None
    ttl_s: int | None = None
    session_id: str | None = None


def operator_asker(registry: Registry) -> AskOperator:
    """How a request_capability that became a task waiting on its client is put before
    the operator as well (`server/tasks/inputs.py`): in the caller's session by the
    session rule, as a pending approval; None when it cannot be (the arguments, the
    session or the pending quotas refuse), and then the client alone answers it."""

    async def ask(
        ctx: ServerRequestContext[Any, Any], arguments: dict[str, Any]
    ) -> OperatorAsked | None:
        try:
            asked = _Asked.model_validate(arguments)
            context: AirlockContext = Context(request_context=ctx, mcp_server=registry.mcp)
            served = running(context)
            session = await registry.lease(served.leases, asked.session_id, context)
            approval_id = await ask_operator_too(
                served.services,
                session,
                capability=asked.capability,
                params=asked.params or {},
                ttl_s=asked.ttl_s,
                reason=asked.reason,
            )
        except (AirlockError, ValidationError) as exc:
            log.info("a capability task waits on its client alone: %s", exc)
            return None
        return OperatorAsked(session_id=session.id, approval_id=approval_id)

    return ask


def _approval(answer: object) -> tools.Approval:
    if isinstance(answer, AcceptedElicitation):
        data = answer.data
        if isinstance(data, ApprovalAnswer):
            return "approved" if data.approve else "declined"
        if data in ("unsupported", "not_asked"):
            return data  # type: ignore[no-any-return]
        return "declined"
    if isinstance(answer, CancelledElicitation):
        return "cancelled"
    return "declined"
