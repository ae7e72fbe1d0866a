"""The extension's JSON, as its 2026-07-28 schema writes it: `CreateTaskResult`,
`GetTaskResult` and the unknown-task error, from a task's record."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp import MCPError
from mcp_types import INVALID_PARAMS

from airlock.store import TaskRecord

EXTENSION = "io.modelcontextprotocol/tasks"

TASK_TOOLS = frozenset({"run_code", "get_patch", "copy_in", "browse"})
"""The tools whose calls may become tasks: the ones that can run for minutes."""


def iso(at: float) -> str:
    """A UNIX time as ISO 8601 in UTC, to the millisecond."""
    text = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def ttl_ms(rec: TaskRecord, now: float) -> int:
    """The spec's TTL counts from creation; Airlock keeps a task `ttl_s` after its end,
    so while it runs the TTL grows with it."""
    end = rec.ended_at if rec.ended_at is not None else now
    return round((end + rec.ttl_s - rec.created_at) * 1000)


def expired(rec: TaskRecord, now: float) -> bool:
    return rec.ended_at is not None and now > rec.ended_at + rec.ttl_s


def task_fields(rec: TaskRecord, *, now: float, poll_interval_ms: int) -> dict[str, Any]:
    """The `DetailedTask` of `rec`: its status with the result or error it ended with."""
    fields: dict[str, Any] = {
        "taskId": rec.id,
        "status": rec.status,
        "createdAt": iso(rec.created_at),
        "lastUpdatedAt": iso(rec.updated_at),
        "ttlMs": ttl_ms(rec, now),
        "pollIntervalMs": poll_interval_ms,
    }
    if rec.status_message is not None:
        fields["statusMessage"] = rec.status_message
    if rec.status == "input_required":
        fields["inputRequests"] = rec.input_requests or {}
    elif rec.status == "completed":
        fields["result"] = rec.result or {}
    elif rec.status == "failed":
        fields["error"] = rec.error or {"code": -32603, "message": "the call failed"}
    return fields


def created(rec: TaskRecord, *, now: float, poll_interval_ms: int) -> dict[str, Any]:
    """The `CreateTaskResult` a tools/call answers when it becomes `rec`."""
    return {"resultType": "task", **task_fields(rec, now=now, poll_interval_ms=poll_interval_ms)}


def got(rec: TaskRecord, *, now: float, poll_interval_ms: int) -> dict[str, Any]:
    """The `GetTaskResult` of `rec` (its resultType is "complete": the schema's)."""
    fields = task_fields(rec, now=now, poll_interval_ms=poll_interval_ms)
    return {"resultType": "complete", **fields}


def unknown_task(task_id: str) -> MCPError:
    """The one answer for a task that does not exist, expired, or is someone else's:
    the same words for each, so an id reveals nothing of another caller's tasks."""
    return MCPError(
        code=INVALID_PARAMS,
        message=f"Failed to retrieve task: unknown task {task_id!r} (tasks are kept "
        "[tasks] ttl_s after they end, and only their caller sees them)",
    )
