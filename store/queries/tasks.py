"""MCP tasks (`server/tasks`): a row made before the call's task handle is answered, ended
once with the call's outcome, and failed with its run when its server instance dies."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select, update

from ..records import TASK_OPEN, TaskRecord, TaskStatus
from ..schema import runs, tasks

_INSERT = insert(tasks)
_GET = select(*tasks.c).where(tasks.c.id == bindparam("id"))
_OPEN = tasks.c.status.in_(TASK_OPEN)
_SET_RUN = update(tasks).where(tasks.c.id == bindparam("task_id")).values(run_id=bindparam("run"))
_JSON = ("result", "error", "input_requests", "call")


def _params(rec: TaskRecord) -> dict[str, Any]:
    params = rec.model_dump()
    for name in _JSON:
        value = params.pop(name)
        params[f"{name}_json"] = None if value is None else json.dumps(value)
    return params


def _record(row: Mapping[Any, Any]) -> TaskRecord:
    fields = dict(row)
    for name in _JSON:
        value = fields.pop(f"{name}_json")
        fields[name] = None if value is None else json.loads(value)
    return TaskRecord.model_validate(fields)


def create_task(conn: Connection, rec: TaskRecord) -> None:
    conn.execute(_INSERT, _params(rec))


def get_task(conn: Connection, task_id: str) -> TaskRecord | None:
    row = conn.execute(_GET, {"id": task_id}).mappings().first()
    return _record(row) if row is not None else None


def set_task_run(conn: Connection, task_id: str, run_id: str) -> None:
    conn.execute(_SET_RUN, {"task_id": task_id, "run": run_id})


def set_input(
    conn: Connection,
    task_id: str,
    *,
    at: float,
    requests: dict[str, Any] | None,
    call: dict[str, Any] | None,
    message: str | None = None,
    instance_id: str | None = None,
) -> bool:
    """`requests` given: the open task waits on its client (`input_required`) to answer
    them, then `call` is retried. None: it goes back to `working` from `input_required`,
    which only one caller can do (the one that answers), run by `instance_id` (when
    given) with `message` as its status message. Whether it changed."""
    waiting = requests is not None
    values: dict[str, Any] = {
        "status": "input_required" if waiting else "working",
        "updated_at": at,
        "input_requests_json": json.dumps(requests) if waiting else None,
        "call_json": json.dumps(call) if waiting else None,
        "status_message": message,
    }
    if instance_id is not None:
        values["instance_id"] = instance_id
    query = (
        update(tasks)
        .where(
            tasks.c.id == task_id, tasks.c.status == ("working" if waiting else "input_required")
        )
        .values(**values)
    )
    return bool(conn.execute(query).rowcount)


def note(conn: Connection, task_id: str, at: float, message: str) -> bool:
    """Set an open task's status message (its progress); whether it was open."""
    query = (
        update(tasks)
        .where(tasks.c.id == task_id, _OPEN)
        .values(status_message=message, updated_at=at)
    )
    return bool(conn.execute(query).rowcount)


def request_cancel(conn: Connection, task_id: str, at: float) -> bool:
    """Record that the caller asked to cancel an open task; whether it was open."""
    query = (
        update(tasks)
        .where(tasks.c.id == task_id, _OPEN, tasks.c.cancel_requested_at.is_(None))
        .values(cancel_requested_at=at)
    )
    return bool(conn.execute(query).rowcount)


def end_task(
    conn: Connection,
    task_id: str,
    *,
    status: TaskStatus,
    at: float,
    message: str | None = None,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
) -> bool:
    """End an open task; an ended one keeps its first end. Whether this ended it."""
    query = (
        update(tasks)
        .where(tasks.c.id == task_id, _OPEN)
        .values(
            status=status,
            status_message=message,
            updated_at=at,
            ended_at=at,
            result_json=None if result is None else json.dumps(result),
            error_json=None if error is None else json.dumps(error),
        )
    )
    return bool(conn.execute(query).rowcount)


def forget_expired(conn: Connection, now: float) -> int:
    """Delete the tasks ended more than their `ttl_s` ago; how many."""
    query = delete(tasks).where(
        tasks.c.ended_at.is_not(None), tasks.c.ended_at + tasks.c.ttl_s < now
    )
    return conn.execute(query).rowcount


def fail_tasks_of(conn: Connection, instance_ids: Sequence[str], at: float) -> int:
    """Fail the working tasks of dead instances, naming each one's run and how it ended (its
    runs were ended first, in the same transaction); return how many."""
    query = (
        select(tasks.c.id, tasks.c.run_id, runs.c.status, runs.c.error)
        .select_from(tasks.outerjoin(runs, runs.c.id == tasks.c.run_id))
        # A task waiting on its client (`input_required`) needs no server: any answers it.
        .where(tasks.c.instance_id.in_(list(instance_ids)), tasks.c.status == "working")
    )
    found = conn.execute(query).all()
    for task_id, run_id, run_status, run_error in found:
        if run_id is None:
            message = "the server running this call stopped before the call started a run"
        else:
            message = (
                f"the server running this call was lost; its run {run_id} ended "
                f"{run_status}: {run_error}"
            )
        error = {
            "code": -32603,
            "message": message,
            "data": {"run_id": run_id, "run_status": run_status},
        }
        end_task(conn, task_id, status="failed", at=at, message=message, error=error)
    return len(found)
