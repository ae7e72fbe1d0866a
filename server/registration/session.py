"""end_session: the one tool without the preamble's lease, since it ends one (or the
connection's default) instead of resolving it."""

# No `from __future__ import annotations`: the SDK reads these signatures (`__init__`).

from typing import Annotated

from airlock.tools import EndSessionResult

from .errors import tool_errors
from .registry import AirlockContext, Registry, hints, running


def register(registry: Registry) -> None:
    EndSessionArg = Annotated[str | None, registry.end_session_field]

    @registry.mcp.tool(
        title="End a session",
        annotations=hints(read_only=False, destructive=True, idempotent=False),
    )
    async def end_session(
        session_id: EndSessionArg = None,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> EndSessionResult:
        """End a session: kill its running code, remove its containers and forget its
        /workspace. Artifacts of its runs stay fetchable.
        """
        leases = running(ctx).leases
        with tool_errors():
            return await leases.end(
                session_id,
                registry.caller(),
                connection=registry.connection(ctx),
                reason="end_session",
            )
