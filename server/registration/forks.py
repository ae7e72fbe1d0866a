"""fork_session and restore_workspace: a session's workspace branched, or taken back to a
version, without copying a byte (blobs are shared by content)."""

# No `from __future__ import annotations`: the SDK reads these signatures (`__init__`).

from typing import Annotated

from pydantic import Field

from airlock import tools
from airlock.tools import ForkResult, RestoreResult

from .registry import AirlockContext, Registry, hints, running

VersionArg = Annotated[int, Field(ge=0, description="A workspace version of this session.")]


def register(registry: Registry) -> None:
    SessionArg = Annotated[str | None, registry.session_field]

    @registry.mcp.tool(
        title="Fork a session",
        annotations=hints(read_only=False, destructive=False, idempotent=False),
    )
    async def fork_session(
        session_id: SessionArg = None,
        version: Annotated[
            int | None, Field(ge=0, description="The version to fork; omit it for the latest.")
        ] = None,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> ForkResult:
        """Start a new session whose /workspace is this session's at a version, to try
        another idea beside it (no capability or browser is carried over)."""
        async with registry.call(ctx, session_id) as call:
            fork, at = await running(ctx).leases.fork(call.session, version)
            return ForkResult(
                session_id=fork.id,
                session_expires_at=fork.expires_at_iso,
                parent=call.session.id,
                version=at,
            )

    @registry.mcp.tool(
        title="Restore a workspace version",
        annotations=hints(read_only=False, destructive=False, idempotent=True),
    )
    async def restore_workspace(
        version: VersionArg,
        session_id: SessionArg = None,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> RestoreResult:
        """Make an earlier version of this session's /workspace current again, as a new
        version (nothing of the history is lost)."""
        async with registry.call(ctx, session_id) as call:
            return await tools.restore_workspace(call.services, call.session, version=version)
