"""browse: a web page in a browser box of its own (`tools.browse`), behind the run's egress
proxy like code, never near the session's files."""

# No `from __future__ import annotations`: the SDK reads these signatures (`__init__`).

from typing import Annotated, Any

from mcp.types import CallToolResult
from pydantic import Field

from airlock.tools.browse import BROWSE_DOC
from airlock.tools.browse import browse as browse_handler
from airlock.tools.browse_input import BROWSE_ACTIONS_DOC

from .registry import AirlockContext, Registry, hints


def register(registry: Registry) -> None:
    SessionArg = Annotated[str | None, registry.session_field]

    @registry.mcp.tool(
        title="Open a web page in a sandboxed browser",
        description=BROWSE_DOC,
        annotations=hints(read_only=False, destructive=False, idempotent=False, open_world=True),
    )
    async def browse(
        url: Annotated[
            str | None, Field(description="http(s) URL; none: stay on the page.")
        ] = None,
        capabilities: Annotated[
            list[str], Field(description="capability_id values that let the page reach hosts.")
        ] = [],  # noqa: B006 - pydantic copies defaults; the schema needs a plain []
        actions: Annotated[list[dict[str, Any]], Field(description=BROWSE_ACTIONS_DOC)] = [],  # noqa: B006
        timeout_s: Annotated[int | None, Field(description="Time limit in seconds.")] = None,
        screenshot: Annotated[bool, Field(description="false: no PNG, the snapshot only.")] = True,
        keep: bool = False,
        browser_id: str | None = None,
        close: bool = False,
        session_id: SessionArg = None,
        ctx: AirlockContext = None,  # type: ignore[assignment]  # injected by the SDK
    ) -> CallToolResult:
        async with registry.call(ctx, session_id, runs=True) as call:
            return await browse_handler(
                call.services,
                call.session,
                url=url,
                actions=actions,
                capabilities=capabilities,
                timeout_s=timeout_s,
                screenshot=screenshot,
                keep=keep,
                browser_id=browser_id,
                close=close,
                progress=call.progress,
            )
