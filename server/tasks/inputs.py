"""Tasks that wait on their client, and on the operator: a `request_capability` that asks
the human (MCP elicitation) from a caller that declares the Tasks extension becomes a task
in `input_required`, its elicitation in `inputRequests`, and a pending approval too
(`AskOperator`), so the operator may answer it out of band like any other (`airlock
approvals`, the console, POST /approvals). The first answer decides: `tasks/update`
retries the call with the client's answers (the approval then counts as the client's), and
once the operator has decided (or the approval expired), the next `tasks/get` or
`tasks/update` on any server of the records retries it with the approval, which grants or
gives the denial the call would have given. A retry runs with the SDK's request state,
which stays in the store (never sent to the client).

Not here: which moves an approval may make (`broker.approvals`), and recording one
(`tools.approvals`, reached through the server's `AskOperator`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import anyio
from mcp import MCPError
from mcp.server.context import HandlerResult
from mcp.types import CallToolRequestParams, InputRequiredResult
from mcp_types import INTERNAL_ERROR

from airlock.broker import approvals
from airlock.ids import new_id
from airlock.policies import TaskSettings
from airlock.store import ApprovalRecord, Database, TaskRecord

from . import wire
from .jobs import INTERNAL, Owner, wire_result

log = logging.getLogger(__name__)

ASKING_TOOLS = frozenset({"request_capability"})
"""The tools whose question to the human may wait as a task."""

CallTool = Callable[[CallToolRequestParams], Awaitable[HandlerResult]]
Now = Callable[[], float]


class OperatorAsked(NamedTuple):
    """The operator's copy of a task's question: the pending approval, in the session
    the call then runs in whoever answers."""

    session_id: str
    approval_id: str


AskOperator = Callable[[Any, dict[str, Any]], Awaitable[OperatorAsked | None]]
"""Records a waiting request_capability (the request's context, its arguments) as a
pending approval; None when it cannot be, and then only the client answers."""

WAITING = "waiting for the client's answer (tasks/update)"


def _waiting(asked: OperatorAsked | None) -> str:
    if asked is None:
        return WAITING
    return (
        f"{WAITING} or the operator's to approval {asked.approval_id} (`airlock approvals "
        "approve` or `deny`, or the operator console)"
    )


def _pending(
    result: InputRequiredResult, params: CallToolRequestParams, asked: OperatorAsked | None
) -> tuple[Any, Any]:
    """What the client is asked, and the call to retry once it (or the operator) answers."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    arguments = dict(params.arguments or {})
    call: dict[str, Any] = {"name": params.name, "requestState": result.request_state}
    if asked is not None:
        # Whoever answers, the call runs in the session its approval was recorded in.
        arguments["session_id"] = asked.session_id
        call["approvalId"] = asked.approval_id
    return dumped.get("inputRequests", {}), {**call, "arguments": arguments}


async def waiting_task(
    db: Database,
    settings: TaskSettings,
    *,
    owner: Owner,
    params: CallToolRequestParams,
    result: InputRequiredResult,
    asked: OperatorAsked | None,
    instance_id: str,
    now: float,
) -> dict[str, Any]:
    """The `CreateTaskResult` of a call that waits on its client, once in the store."""
    requests, call = _pending(result, params, asked)
    record = TaskRecord(
        id=new_id("task_"),
        tenant=owner.tenant,
        principal=owner.principal,
        tool=params.name,
        status="input_required",
        created_at=now,
        updated_at=now,
        ttl_s=settings.ttl_s,
        instance_id=instance_id,
        status_message=_waiting(asked),
        input_requests=requests,
        call=call,
    )
    await db.create_task(record)
    return wire.created(record, now=now, poll_interval_ms=settings.poll_interval_ms)


async def answer(
    db: Database,
    record: TaskRecord,
    responses: dict[str, Any],
    call_tool: CallTool,
    now: Now,
    *,
    instance_id: str,
) -> None:
    """Retry the task's call with the client's `responses`, or with the operator's
    decision when it came first: it ends the task, or asks again. Only the first of
    concurrent answers retries; answers to no outstanding request are ignored (the task's
    status message says who answered it)."""
    call = record.call
    if record.status != "input_required" or call is None:
        return
    if not set(responses) & set(record.input_requests or {}):
        return
    approval_id: str | None = call.get("approvalId")
    if approval_id is not None and _dismissed(responses):
        message = (
            "the client dismissed the question; waiting for the operator's answer to "
            f"approval {approval_id}"
        )
        await db.note_task(record.id, at=now(), message=message)
        return
    if not await db.set_task_input(
        record.id, at=now(), requests=None, message="retrying the call", instance_id=instance_id
    ):
        return
    params = _retried(call, inputResponses=responses, requestState=call.get("requestState"))
    summary = "answered by the client (tasks/update)"
    if approval_id is not None:
        approval = await db.get_approval(approval_id)
        approve = _approves(responses)
        if approval is not None and not await approvals.answer(
            db, approval, approve=approve, now=now()
        ):
            # The operator decided first (or the approval expired): that answer stands.
            decided = await db.get_approval(approval_id)
            summary = (
                f"{_decision(decided or approval, now())}; the client's later answer was not used"
            )
            params = _retried(call, approval_id=approval_id)
    await _retry(db, record, params, call_tool, now, summary=summary)


async def settle(
    db: Database, record: TaskRecord, call_tool: CallTool, now: Now, *, instance_id: str
) -> bool:
    """Once the operator decided a waiting task's approval (or it expired), retry its
    call with it: the grant, or the refusal the call gives. Whether the task moved."""
    approval_id = (record.call or {}).get("approvalId")
    if record.status != "input_required" or record.call is None or approval_id is None:
        return False
    approval = await db.get_approval(approval_id)
    if approval is None or approvals.status_at(approval, now()) == "pending":
        return False
    summary = _decision(approval, now())
    moved = await db.set_task_input(
        record.id,
        at=now(),
        requests=None,
        message=f"{summary}; retrying the call",
        instance_id=instance_id,
    )
    if moved:
        params = _retried(record.call, approval_id=approval_id)
        await _retry(db, record, params, call_tool, now, summary=summary)
    return True


async def _retry(
    db: Database,
    record: TaskRecord,
    params: CallToolRequestParams,
    call_tool: CallTool,
    now: Now,
    *,
    summary: str,
) -> None:
    """Run the task's call again and end the task with what it answers (or wait again)."""
    try:
        result = await call_tool(params)
    except BaseException as exc:
        # Never left `working` with no job behind it: the retry runs in this request only.
        failure = exc if isinstance(exc, MCPError) else MCPError(INTERNAL_ERROR, INTERNAL)
        error = failure.error.model_dump(mode="json", exclude_none=True)
        with anyio.CancelScope(shield=True):
            await db.end_task(
                record.id, status="failed", at=now(), error=error, message=failure.message
            )
        if not isinstance(exc, Exception):
            raise
        if not isinstance(exc, MCPError):
            log.error("the retried call of %s failed", record.tool, exc_info=exc)
        return
    if isinstance(result, InputRequiredResult):
        requests, again = _pending(result, params, None)
        await db.set_task_input(record.id, at=now(), requests=requests, call=again, message=WAITING)
        return
    await db.end_task(
        record.id, status="completed", at=now(), result=wire_result(result), message=summary
    )


def _retried(
    call: dict[str, Any], *, approval_id: str | None = None, **answers: Any
) -> CallToolRequestParams:
    """The task's call again: with the client's answers, or collecting the approval (which
    asks nobody: the tool redeems what the operator decided)."""
    arguments = dict(call["arguments"])
    if approval_id is not None:
        arguments["approval_id"] = approval_id
    return CallToolRequestParams.model_validate(
        {"name": call["name"], "arguments": arguments, **answers}
    )


def _decision(approval: ApprovalRecord, now: float) -> str:
    status = approvals.status_at(approval, now)
    if status == "expired":
        return f"approval {approval.id} expired without the operator's decision"
    if status in ("approved", "denied"):
        return f"the operator {status} approval {approval.id}"
    return f"approval {approval.id} is {status}"


def _approves(responses: dict[str, Any]) -> bool:
    """Whether the client's human said yes to request_capability's one question (its
    `approve` field): only how the approval is recorded, the retried call decides."""
    return any(
        isinstance(r, dict)
        and r.get("action") == "accept"
        and (r.get("content") or {}).get("approve") is True
        for r in responses.values()
    )


def _dismissed(responses: dict[str, Any]) -> bool:
    """Whether the human closed the question unanswered (the operator may still answer)."""
    return all(isinstance(r, dict) and r.get("action") == "cancel" for r in responses.values())
