"""`TasksExtension`: what the SDK's extension hooks get. It advertises the extension
(server/discover), turns the long tools' calls of declaring 2026-07-28 callers into jobs
(`TaskJobs.answer`) and a question to the human into a waiting task (`inputs`), and
serves tasks/get, tasks/cancel and tasks/update from the store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.server.subscriptions import ListenHandler
from mcp.types import CallToolRequestParams, InputRequiredResult, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from airlock.store import TaskRecord
from airlock.tools.context import Services

from ..auth import current_tenant
from . import inputs, wire
from .jobs import Owner, TaskJobs
from .listen import TaskListen


class Running(Protocol):
    """What the server's lifespan context (`server.running.Running`) gives the extension;
    a protocol, since `running` builds the jobs and so imports this package."""

    @property
    def services(self) -> Services: ...

    @property
    def tasks(self) -> TaskJobs: ...


Context = ServerRequestContext[Any, Any]
ToolHandler = Callable[[Context, CallToolRequestParams], Awaitable[HandlerResult]]


class TaskParams(RequestParams):
    """The params of tasks/get and tasks/cancel."""

    task_id: str


class UpdateParams(TaskParams):
    """The params of tasks/update: answers keyed as the task's inputRequests."""

    input_responses: dict[str, Any]


class TasksExtension(Extension):
    """The extension, for `MCPServer(extensions=...)`; `bind` gives it the server's
    tools/call handler once the server exists."""

    identifier = wire.EXTENSION

    def __init__(self, *, local_tenant: str) -> None:
        self._local_tenant = local_tenant
        self._call_tool: ToolHandler | None = None
        self._ask_operator: inputs.AskOperator | None = None

    def bind(self, call_tool: ToolHandler, ask_operator: inputs.AskOperator) -> None:
        """The server's own tools/call handler, which a waiting task's call is retried
        with, and how a waiting request_capability is put before the operator as well."""
        self._call_tool, self._ask_operator = call_tool, ask_operator

    def methods(self) -> Sequence[MethodBinding]:
        modern = frozenset(MODERN_PROTOCOL_VERSIONS)
        return (
            MethodBinding("tasks/get", TaskParams, self._get, modern),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, modern),
            MethodBinding("tasks/update", UpdateParams, self._update, modern),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: Context, call_next: CallNext
    ) -> HandlerResult:
        if not _declares(ctx):
            return await call_next(ctx)
        running: Running = ctx.lifespan_context
        if params.name in inputs.ASKING_TOOLS:
            result = await call_next(ctx)
            if not isinstance(result, InputRequiredResult):
                return result
            services = running.services
            asked = None
            if self._ask_operator is not None:
                asked = await self._ask_operator(ctx, dict(params.arguments or {}))
            return await inputs.waiting_task(
                services.db,
                running.tasks.settings,
                owner=self._owner(),
                params=params,
                result=result,
                asked=asked,
                instance_id=services.instance_id,
                now=services.clock(),
            )
        if params.name not in wire.TASK_TOOLS:
            return await call_next(ctx)
        return await running.tasks.answer(params.name, self._owner(), lambda: call_next(ctx))

    async def _update(self, ctx: Context, params: UpdateParams) -> HandlerResult:
        running, record = await self._visible(ctx, params.task_id)
        services = running.services
        await inputs.answer(
            services.db,
            record,
            params.input_responses,
            self._retrying(ctx),
            services.clock,
            instance_id=services.instance_id,
        )
        return {"resultType": "complete"}

    async def _get(self, ctx: Context, params: TaskParams) -> HandlerResult:
        running, record = await self._visible(ctx, params.task_id, settled=True)
        jobs = running.tasks
        now = running.services.clock()
        return wire.got(record, now=now, poll_interval_ms=jobs.settings.poll_interval_ms)

    async def _cancel(self, ctx: Context, params: TaskParams) -> HandlerResult:
        running, record = await self._visible(ctx, params.task_id)
        if record.status in ("working", "input_required"):
            await running.tasks.cancel(record)
        return {"resultType": "complete"}

    def _retrying(self, ctx: Context) -> inputs.CallTool:
        """The server's tools/call handler, in this request's context."""
        call_tool = self._call_tool
        assert call_tool is not None, "TasksExtension.bind was not called"
        return lambda retried: call_tool(ctx, retried)

    def listening(self, sdk: ListenHandler) -> TaskListen:
        """The server's subscriptions/listen handler: `sdk`'s, and task status pushed to
        a stream whose filter names `taskIds` (`listen.py`)."""
        return TaskListen(sdk, self._settled)

    async def _visible(
        self, ctx: Context, task_id: str, *, settled: bool = False
    ) -> tuple[Running, TaskRecord]:
        """The caller's task `task_id` (`settled`: as `_settled`), or the unknown-task error."""
        require_client_extension(ctx, wire.EXTENSION)
        record = await (self._settled if settled else self._find)(ctx, task_id)
        if record is None:
            raise wire.unknown_task(task_id)
        return ctx.lifespan_context, record

    async def _settled(self, ctx: Context, task_id: str) -> TaskRecord | None:
        """As `_find`, once a waiting task the operator answered out of band has moved on
        with that answer: whoever looks at the task (a poll, a listen stream) moves it."""
        record = await self._find(ctx, task_id)
        if record is None:
            return None
        services = ctx.lifespan_context.services
        retry = self._retrying(ctx)
        if await inputs.settle(
            services.db, record, retry, services.clock, instance_id=services.instance_id
        ):
            return await self._find(ctx, task_id)
        return record

    async def _find(self, ctx: Context, task_id: str) -> TaskRecord | None:
        """The caller's task `task_id`; None for one that never existed, one expired, and
        another caller's alike."""
        running: Running = ctx.lifespan_context
        record = await running.services.db.get_task(task_id)
        owner = self._owner()
        if (
            record is None
            or (record.tenant, record.principal) != (owner.tenant, owner.principal)
            or wire.expired(record, running.services.clock())
        ):
            return None
        return record

    def _owner(self) -> Owner:
        token = get_access_token()
        principal = token.client_id if token is not None else ""
        return Owner(current_tenant() or self._local_tenant, principal)


def _declares(ctx: Context) -> bool:
    """Whether this request may be answered with a task: a 2026-07-28 request whose own
    client capabilities declare the extension (handshake-era results cannot carry one)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and wire.EXTENSION in (extensions or {})
