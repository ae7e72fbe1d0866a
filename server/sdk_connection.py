"""The one place Airlock reaches into the MCP SDK's private connection object.

The SDK (mcp 2.x) gives a tool no public hook for "this client's connection went away". A
handshake-era connection (2024-11-05 to 2025-11-25: initialize, Mcp-Session-Id, DELETE,
idle timeout) has an `exit_stack` the SDK closes when the connection ends, reachable only
as `ctx.request_context.session._connection`. On 2026-07-28 a connection lasts one request,
so nothing is worth binding to it and this adapter is not consulted. `mcp` follows 2.x
because if the SDK changes shape, `connection_exit_stack` raises naming this module rather
than quietly never ending a lease, and tests/rooms/server/test_sdk_connection.py fails loudly.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from mcp.server.connection import Connection
from mcp.server.mcpserver import Context
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

SDK_CHANGED = (
    "the mcp SDK no longer keeps a handshake-era connection's exit stack where Airlock "
    "expects it (server/sdk_connection.py); install an mcp release the adapter knows or "
    "update the adapter"
)


def connection_exit_stack(ctx: Context[Any, Any]) -> AsyncExitStack | None:
    """The exit stack of the caller's handshake-era connection, closed when it ends;
    None on 2026-07-28, where a connection is one request."""
    if ctx.request_context.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return None
    connection = getattr(ctx.request_context.session, "_connection", None)
    stack = getattr(connection, "exit_stack", None)
    if not isinstance(connection, Connection) or not isinstance(stack, AsyncExitStack):
        raise RuntimeError(SDK_CHANGED)
    return stack
