"""The adapter over the MCP SDK's private connection object (server/sdk_connection.py).

Against the real SDK, through its in-memory client in both eras: if an SDK upgrade moves
what the adapter reads, these fail naming the adapter, instead of leases quietly never
ending with their connection.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import Context, MCPServer

from airlock.server.sdk_connection import connection_exit_stack

pytestmark = pytest.mark.anyio


def probe_server(seen: list[str]) -> MCPServer:
    mcp = MCPServer("probe")

    @mcp.tool()
    async def bind(ctx: Context[Any, Any]) -> str:
        stack = connection_exit_stack(ctx)
        if stack is None:
            return "no connection to bind to"
        stack.callback(seen.append, "connection closed")
        return "bound"

    return mcp


async def test_a_handshake_era_connection_closes_its_exit_stack_when_it_ends() -> None:
    seen: list[str] = []
    async with Client(probe_server(seen), mode="legacy", raise_exceptions=True) as client:
        result = await client.call_tool("bind", {})
        assert not result.is_error, result.content
        assert result.structured_content == {"result": "bound"}
        assert seen == []
    assert seen == ["connection closed"]


async def test_a_2026_07_28_request_has_no_connection_to_bind_to() -> None:
    seen: list[str] = []
    async with Client(probe_server(seen), mode="auto", raise_exceptions=True) as client:
        result = await client.call_tool("bind", {})
        assert not result.is_error, result.content
        assert result.structured_content == {"result": "no connection to bind to"}
    assert seen == []
