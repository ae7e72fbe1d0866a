"""`Registry`: what every registration step shares, and the one tool preamble.

Every tool but end_session starts the same way: read what the lifespan built, resolve the
caller's session lease by the session rule (a lease made for a handshake-era HTTP
connection ends with that connection), optionally hold a run slot in it, translate
Airlock's errors into tool errors, and report progress. `Registry.call` is that preamble;
`Registry.resource_call` is the resources' (the caller's tenant, "not found" kept).
"""

from __future__ import annotations

import sys
from collections.abc import Hashable, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp.types import ToolAnnotations
from pydantic import Field
from pydantic.fields import FieldInfo

from airlock.errors import AirlockError, NotFound
from airlock.policies import Policy
from airlock.tools import Services, Session
from airlock.tools.artifacts import MAX_FETCH_BYTES

from ..auth import current_tenant
from ..running import Running
from ..sdk_connection import connection_exit_stack
from ..sessions import STDIO, Leases, SessionRule
from ..tasks.jobs import report_progress
from .errors import tool_errors

AirlockContext = Context[Running, Any]
"""A request's context: its lifespan context is what `running.serving` yielded."""

MaxBytesArg = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_FETCH_BYTES,
        description=f"At most this many bytes (1 to {MAX_FETCH_BYTES}).",
    ),
]
"""The page size of every paged read (fetch_artifact, read_workspace_file, get_patch)."""


def hints(
    *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool = False
) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=open_world,
    )


@dataclass(frozen=True)
class Call:
    """What the preamble resolved for one tool call."""

    services: Services
    session: Session
    ctx: AirlockContext

    async def progress(self, elapsed: float, message: str) -> None:
        """Progress for the caller (nothing without a progress token), or, once the call
        became an MCP task, its task's status message (`tasks/get` shows it)."""
        if not await report_progress(message):
            await self.ctx.report_progress(elapsed, None, message)


class Registry:
    """The server being built and what its registration steps need to know.

    Over stdio there is always a connection; over HTTP the session rule depends on the
    caller's protocol era, and tools/list says each caller's (`session_field` holds the
    sentence registered, which the server replaces per request)."""

    def __init__(
        self,
        mcp: MCPServer,
        policy: Policy,
        tenant_policies: Mapping[str, Policy],
        *,
        http: bool,
        local_tenant: str,
    ) -> None:
        self.mcp = mcp
        self.policy = policy
        self.tenant_policies = tenant_policies
        self.per_tenant = bool(tenant_policies)
        self.http = http
        self.local_tenant = local_tenant
        rule = SessionRule(connection=not http)
        # A step's `SessionArg = Annotated[str | None, registry.session_field]`.
        self.session_field: FieldInfo = Field(max_length=64, description=rule.argument)
        self.end_session_field: FieldInfo = Field(max_length=64, description=rule.end_argument)

    @property
    def every_policy(self) -> list[Policy]:
        """The server's policy and each tenant's: a schema bound holds for all of them."""
        return [self.policy, *self.tenant_policies.values()]

    def call(self, ctx: AirlockContext, session_id: str | None, *, runs: bool = False) -> _Preamble:
        """The preamble of a tool call, as `async with registry.call(ctx, session_id) as call:`;
        with `runs`, the call holds one of its tenant's run slots (run_code, copy_in)."""
        return _Preamble(self, ctx, session_id, runs=runs)

    @contextmanager
    def resource_call(self, ctx: AirlockContext) -> Iterator[tuple[Services, str]]:
        """The services and the caller's tenant for a resource read; Airlock's errors as
        the SDK's resource errors, "not found" kept, so another tenant's resource and one
        that never existed answer alike."""
        try:
            yield running(ctx).services, self.caller()
        except NotFound as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        except AirlockError as exc:
            raise ResourceError(str(exc)) from exc

    def caller(self) -> str:
        """The tenant of the current request: from its token, else the local user."""
        return current_tenant() or self.local_tenant

    def connection(self, ctx: AirlockContext) -> Hashable | None:
        """What identifies the caller's connection: the process over stdio, the handshake-era
        connection's exit stack over HTTP, None for a 2026-07-28 HTTP request (none)."""
        if not self.http:
            return STDIO
        return connection_exit_stack(ctx)

    async def lease(self, leases: Leases, session_id: str | None, ctx: AirlockContext) -> Session:
        """The caller's lease by the session rule. The default lease of a handshake-era HTTP
        connection (which has a lifetime: DELETE, idle timeout) ends with that connection;
        one asked for by "new" is the agent's, living until end_session or its idle limit
        on any replica, as on every other transport and era."""
        connection = self.connection(ctx)
        session, created = await leases.resolve(session_id, self.caller(), connection=connection)
        if created and session_id is None and isinstance(connection, AsyncExitStack):
            leases.end_with(connection, session)
        return session


def running(ctx: AirlockContext) -> Running:
    """What the lifespan built, as the SDK hands it to this request."""
    return ctx.request_context.lifespan_context


class _Preamble:
    """`Registry.call`. A class, like `tool_errors`, so type checkers know the block's
    exceptions always propagate (tool functions need no unreachable returns)."""

    def __init__(
        self, registry: Registry, ctx: AirlockContext, session_id: str | None, *, runs: bool
    ) -> None:
        self._registry, self._ctx, self._session_id, self._runs = registry, ctx, session_id, runs
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Call:
        served = running(self._ctx)
        # Outermost, so errors of the lease, its run slot and the handler all become tool errors.
        self._stack.enter_context(tool_errors())
        try:
            session = await self._registry.lease(served.leases, self._session_id, self._ctx)
            if self._runs:
                await self._stack.enter_async_context(served.leases.running(session))
        except BaseException:
            await self._stack.__aexit__(*sys.exc_info())  # raises the translated error
            raise
        return Call(served.services, session, self._ctx)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stack.__aexit__(exc_type, exc, tb)
