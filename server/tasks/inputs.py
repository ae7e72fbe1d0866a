"""Tasks that wait on their client: a `request_capability` that asks the human (MCP
elicitation) from a caller that declares the Tasks extension becomes a task in
`input_required`, its elicitation in `inputRequests`; `tasks/update` answers it, on any
server of the records, by retrying the call with the answers and the SDK's request state,
which stays in the store (never sent to the client)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import MCPError
from mcp.server.context import HandlerResult
from mcp.types import CallToolRequestParams, InputRequiredResult
from mcp_types import INTERNAL_ERROR

from airlock.ids import new_id
from airlock.policies import TaskSettings
from airlock.store import Database, TaskRecord

from . import wire
from .jobs import INTERNAL, Owner, wire_result

log = logging.getLogger(__name__)

ASKING_TOOLS = frozenset({"request_capability"})
"""The tools whose question to the human may wait as a task."""

CallTool = Callable[[CallToolRequestParams], Awaitable[HandlerResult]]


def _pending(result: InputRequiredResult, params: CallToolRequestParams) -> tuple[Any, Any]:
    """What the client is asked, and the call to retry once it answers."""
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    call = {"name": params.name, "arguments": params.arguments or {}}
    return dumped.get("inputRequests", {}), {**call, "requestState": result.request_state}


async def waiting_task(
    db: Database,
    settings: TaskSettings,
    *,
    owner: Owner,
    params: CallToolRequestParams,
    result: InputRequiredResult,
    instance_id: str,
    now: float,
) -> dict[str, Any]:
    """The `CreateTaskResult` of a call that waits on its client, once in the store."""
    requests, call = _pending(result, params)
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
        status_message="waiting for the client's answer (tasks/update)",
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
    now: Callable[[], float],
) -> None:
    """Retry the task's call with `responses`: it ends the task, or asks again. Only the
    first of concurrent answers retries; answers to a task not waiting are ignored."""
    if record.status != "input_required" or record.call is None:
        return
    if not await db.set_task_input(record.id, at=now(), requests=None):
        return
    call = record.call
    params = CallToolRequestParams.model_validate(
        {
            "name": call["name"],
            "arguments": call["arguments"],
            "inputResponses": responses,
            "requestState": call.get("requestState"),
        }
    )
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
        requests, again = _pending(result, params)
        await db.set_task_input(record.id, at=now(), requests=requests, call=again)
        return
    await db.end_task(record.id, status="completed", at=now(), result=wire_result(result))
