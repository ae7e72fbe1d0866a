"""Tool calls as jobs that may outlive their answer: `TaskJobs.answer` runs a call on the
server's task group and waits `[tasks] answer_within_s` for it; a call done by then
answers as always, one still going becomes a task, written to the store before its handle
is answered, and ended there with the call's outcome when it finishes.

A task's progress is its status message, which `tasks/get` shows: the extension defines
no progress notification for a task (`notifications/progress` "are not supported on
tasks"), and once the handle is answered the call's own stream is gone, so a call that
became a task reports to the store (`report_progress`) instead of notifying."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.server.context import HandlerResult
from mcp_types import INTERNAL_ERROR
from pydantic import BaseModel

from airlock.errors import AirlockError
from airlock.ids import new_id
from airlock.policies import TaskSettings
from airlock.store import AnyNotice, Database, Notices, TaskCancelRequested, TaskRecord
from airlock.tools.run_record import run_started

from . import wire

log = logging.getLogger(__name__)

Call = Callable[[], Awaitable[HandlerResult]]
FORGET_INTERVAL_S = 60.0
INTERNAL = "the call failed inside the server; its log says why"

_progress: ContextVar[Callable[[str], Awaitable[bool]] | None] = ContextVar(
    "task_progress", default=None
)


async def report_progress(message: str) -> bool:
    """Note `message` as the progress of the current call's task; False when the call is
    not a task (then its caller is notified as always)."""
    note = _progress.get()
    return note is not None and await note(message)


@dataclass(frozen=True)
class Owner:
    """Whose a task is: only the same tenant and principal may read or cancel it."""

    tenant: str
    principal: str


@dataclass
class _Job:
    tool: str
    owner: Owner
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    result: HandlerResult = None
    error: MCPError | None = None
    task_id: str | None = None
    """Set when the call became a task (then its outcome goes to the store)."""
    written: anyio.Event = field(default_factory=anyio.Event)
    row: bool = False
    """Whether the task's row was written (False after `written` too if writing failed)."""
    run_id: str | None = None
    noted_at: float = float("-inf")
    """When its progress was last written (at most once per poll interval)."""


class TaskJobs:
    """This server's calls that may become tasks, on the server's task group."""

    def __init__(
        self,
        db: Database,
        group: TaskGroup,
        settings: TaskSettings,
        *,
        notices: Notices,
        instance_id: str,
        clock: Callable[[], float],
    ) -> None:
        self._db, self._group, self.settings = db, group, settings
        self._notices, self._instance_id, self._clock = notices, instance_id, clock
        self._live: dict[str, _Job] = {}
        notices.subscribe(self._told, "task_cancel_requested")
        notices.on_resync(self._reread)

    async def answer(self, tool: str, owner: Owner, call: Call) -> HandlerResult:
        """The call's own answer if it ends within `answer_within_s`, else a
        `CreateTaskResult` once its task is in the store. Started in the caller's context
        (its access token goes with it); cancelling the caller before the handle is
        answered cancels the call, as for any call."""
        job = _Job(tool, owner)
        self._group.start_soon(self._run, job, call)
        try:
            with anyio.move_on_after(self.settings.answer_within_s):
                await job.done.wait()
            if job.done.is_set():
                if job.error is not None:
                    raise job.error
                return job.result
            job.task_id = new_id("task_")
            record = await self._write(job)
        except BaseException:
            if not job.row:
                job.scope.cancel()
                job.written.set()
            raise
        return wire.created(
            record, now=self._clock(), poll_interval_ms=self.settings.poll_interval_ms
        )

    async def serve(self) -> None:
        """Forget the tasks kept past their `ttl_s` (tasks/get already answers them as
        unknown), every `FORGET_INTERVAL_S`, until cancelled."""
        while True:
            await anyio.sleep(FORGET_INTERVAL_S)
            try:
                await self._db.forget_expired_tasks(now=self._clock())
            except AirlockError as exc:
                log.warning("forgetting expired tasks failed: %s", exc)

    async def cancel(self, record: TaskRecord) -> None:
        """Cancel an open task's call, whichever server of the records runs it: the
        request is recorded, then announced; the server running the call stops it."""
        if await self._db.request_task_cancel(record.id, at=self._clock()):
            notice = TaskCancelRequested(task_id=record.id, tenant=record.tenant)
            await self._notices.publish(notice)

    async def _told(self, notice: AnyNotice) -> None:
        if isinstance(notice, TaskCancelRequested) and notice.task_id in self._live:
            await self._cancel_if_asked(notice.task_id)

    async def _reread(self) -> None:
        """Notices may have been missed: cancel the calls whose cancel is recorded."""
        for task_id in list(self._live):
            await self._cancel_if_asked(task_id)

    async def _cancel_if_asked(self, task_id: str) -> None:
        # The records are the truth; a notice only says to look.
        record = await self._db.get_task(task_id)
        job = self._live.get(task_id)
        if job is not None and record is not None and record.cancel_requested_at is not None:
            job.scope.cancel()

    async def _write(self, job: _Job) -> TaskRecord:
        assert job.task_id is not None
        now = self._clock()
        record = TaskRecord(
            id=job.task_id,
            tenant=job.owner.tenant,
            principal=job.owner.principal,
            tool=job.tool,
            status="working",
            created_at=now,
            updated_at=now,
            ttl_s=self.settings.ttl_s,
            instance_id=self._instance_id,
            run_id=job.run_id,
        )
        await self._db.create_task(record)
        job.row = True
        self._live[job.task_id] = job
        job.written.set()
        if job.run_id != record.run_id and job.run_id is not None:
            # The run started while the row was being written.
            await self._db.set_task_run(job.task_id, job.run_id)
        return record

    async def _run(self, job: _Job, call: Call) -> None:
        async def note_run(run_id: str) -> None:
            job.run_id = run_id
            if job.row and job.task_id is not None:
                await self._db.set_task_run(job.task_id, run_id)

        run_started.set(note_run)
        _progress.set(lambda message: self._note(job, message))
        try:
            with job.scope:
                try:
                    job.result = await call()
                except MCPError as exc:
                    job.error = exc
                except Exception:
                    # The SDK makes a tool's own errors results; this is a fault of ours,
                    # and it must not take the server's task group down with it.
                    log.exception("the call of %s failed", job.tool)
                    job.error = MCPError(INTERNAL_ERROR, INTERNAL)
        except BaseException:
            # The server stops: the task must not read `working` for ever.
            job.done.set()
            with anyio.CancelScope(shield=True):
                await self._end(job, "failed", _stopped(job))
            raise
        job.done.set()
        if job.scope.cancelled_caught:
            await self._end(job, "cancelled", {})
        elif job.error is not None:
            error = job.error.error.model_dump(mode="json", exclude_none=True)
            await self._end(job, "failed", {"error": error, "message": job.error.message})
        else:
            await self._end(job, "completed", {"result": wire_result(job.result)})

    async def _note(self, job: _Job, message: str) -> bool:
        """The call's progress as its task's status message, once it is a task."""
        if job.task_id is None:
            return False
        now = self._clock()
        if job.row and now - job.noted_at >= self.settings.poll_interval_ms / 1000:
            job.noted_at = now
            try:
                await self._db.note_task(job.task_id, at=now, message=message)
            except AirlockError as exc:
                log.debug("task %s: its progress was not noted: %s", job.task_id, exc)
        return True

    async def _end(self, job: _Job, status: Any, outcome: dict[str, Any]) -> None:
        """Record the outcome of a call that became a task (a call answered directly has
        no task to end)."""
        if job.task_id is None:
            return
        await job.written.wait()
        self._live.pop(job.task_id, None)
        if not job.row:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self._db.end_task(job.task_id, status=status, at=self._clock(), **outcome)
            except AirlockError as exc:
                log.error("task %s of %s: its outcome was not kept: %s", job.task_id, job.tool, exc)


def wire_result(result: HandlerResult) -> dict[str, Any]:
    """The result as the wire would have carried it (a CallToolResult, camelCase)."""
    if isinstance(result, BaseModel):
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    else:
        dumped = dict(result or {})
    return {"resultType": "complete", **dumped}


def _stopped(job: _Job) -> dict[str, Any]:
    run = f"; its run {job.run_id} was ended with it" if job.run_id else ""
    message = f"the server stopped before the call finished{run}"
    error = {"code": INTERNAL_ERROR, "message": message, "data": {"run_id": job.run_id}}
    return {"error": error, "message": message}
