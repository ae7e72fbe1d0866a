"""fork_session and restore_workspace through the MCP client: a fork is a session of its
own that counts toward the tenant's live sessions, and a bad version is a tool error
naming the versions there are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import error_text, structured

pytestmark = pytest.mark.anyio


async def test_a_fork_is_a_new_session_counted_toward_the_tenants_live_sessions(
    make_server: Callable[..., MCPServer],
) -> None:
    server = make_server({"tenants": {"max_live_sessions": 2}})
    async with Client(server) as client:
        parent: dict[str, Any] = structured(await client.call_tool("list_workspace", {}))
        forked = structured(
            await client.call_tool("fork_session", {"session_id": parent["session_id"]})
        )
        assert forked["parent"] == parent["session_id"]
        assert forked["session_id"] != parent["session_id"] and forked["version"] == 0
        listing = structured(
            await client.call_tool("list_workspace", {"session_id": forked["session_id"]})
        )
        assert listing["entries"] == [] and listing["version"] == 0
        third = await client.call_tool("fork_session", {"session_id": parent["session_id"]})
        assert third.is_error and "max_live_sessions" in error_text(third)


async def test_a_version_the_session_lacks_is_a_tool_error_naming_its_versions(
    make_server: Callable[..., MCPServer],
) -> None:
    async with Client(make_server()) as client:
        restored = await client.call_tool("restore_workspace", {"version": 4})
        assert restored.is_error and "versions are 0 to 0" in error_text(restored)
        forked = await client.call_tool("fork_session", {"version": 4})
        assert forked.is_error and "versions are 0 to 0" in error_text(forked)


async def test_a_fork_sees_the_parents_files_and_each_later_change_stays_on_its_own_side(
    make_server: Callable[..., MCPServer],
) -> None:
    async with Client(make_server()) as client:
        first = structured(
            await client.call_tool("run_code", {"code": "open('a.txt', 'w').write('a')"})
        )
        parent = first["session_id"]
        fork = structured(await client.call_tool("fork_session", {"session_id": parent}))
        assert fork["version"] == first["workspace_version"]
        child = fork["session_id"]
        read = "import os; print(sorted(os.listdir('.')))"
        write_b = "open('b.txt', 'w').write('b'); " + read
        in_fork = structured(
            await client.call_tool("run_code", {"code": write_b, "session_id": child})
        )
        in_parent = structured(
            await client.call_tool("run_code", {"code": read, "session_id": parent})
        )
        assert in_fork["stdout"]["text"] == "['a.txt', 'b.txt']\n"
        assert in_parent["stdout"]["text"] == "['a.txt']\n"
        # The fork goes back to where it started, as a new version.
        restored = structured(
            await client.call_tool(
                "restore_workspace", {"version": fork["version"], "session_id": child}
            )
        )
        assert restored["version"] == in_fork["workspace_version"] + 1
        again = structured(await client.call_tool("run_code", {"code": read, "session_id": child}))
        assert again["stdout"]["text"] == "['a.txt']\n"


async def test_a_capability_of_the_parent_is_refused_in_the_fork(
    make_server: Callable[..., MCPServer],
) -> None:
    api = {
        "hosts": ["api.example"],
        "ports": [443],
        "methods": ["GET"],
        "paths": ["/**"],
        "approval": "auto",
    }
    async with Client(make_server({"capabilities": {"api": api}})) as client:
        granted = structured(
            await client.call_tool(
                "request_capability", {"session_id": "new", "capability": "api", "reason": "t"}
            )
        )
        parent, cap = granted["session_id"], granted["capability_id"]
        fork = structured(await client.call_tool("fork_session", {"session_id": parent}))
        stolen = await client.call_tool(
            "run_code", {"code": "pass", "session_id": fork["session_id"], "capabilities": [cap]}
        )
        assert stolen.is_error and "unknown, expired or revoked" in error_text(stolen)
        own = structured(
            await client.call_tool(
                "run_code", {"code": "pass", "session_id": parent, "capabilities": [cap]}
            )
        )
        assert own["status"] == "ok"
