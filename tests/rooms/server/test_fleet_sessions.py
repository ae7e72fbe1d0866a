"""Any server of a fleet serves any call of a session: two servers on one store (here two
servers in this process on one data directory, the store every replica reads) alternate call
by call, and what one did the other sees.

The fleet over PostgreSQL (what one server changes reaching the others) is
tests/rooms/server/test_fleet_effects.py and tests/rooms/server/test_fleet_quotas.py; this
is the session rule's own part of it, cheap enough to run without containers where no code
runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import text_of
from upstream import Upstream

from airlock.broker import Vault, load_key, vault_path

pytestmark = pytest.mark.anyio


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


async def refused(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error
    return text_of(result)


async def test_a_session_started_on_one_server_runs_and_ends_on_the_other(
    make_server: Callable[..., MCPServer],
) -> None:
    a, b = make_server(), make_server()
    async with Client(a) as on_a, Client(b) as on_b:
        first = await call(
            on_a, "run_code", session_id="new", language="bash", code="echo one > note.txt"
        )
        session = first["session_id"]
        second = await call(
            on_b,
            "run_code",
            session_id=session,
            language="bash",
            code="cat note.txt; echo two >> note.txt",
        )
        assert second["stdout"]["text"] == "one\n"
        listed = await call(on_a, "list_workspace", session_id=session)
        assert [e["path"] for e in listed["entries"]] == ["note.txt"]
        assert listed["version"] == second["workspace_version"]
        ended = await call(on_b, "end_session", session_id=session)
        assert ended["ended"] is True
        # The server that started it hears of the end from the store on its next call.
        message = await refused(on_a, "list_workspace", session_id=session)
        assert f"unknown session {session!r}" in message
        again = await refused(on_b, "run_code", session_id=session, language="bash", code="true")
        assert f"unknown session {session!r}" in again


async def test_an_ended_session_is_unknown_on_every_server(
    make_server: Callable[..., MCPServer],
) -> None:
    a, b = make_server(), make_server()
    async with Client(a) as on_a, Client(b) as on_b:
        session = (await call(on_a, "list_workspace", session_id="new"))["session_id"]
        assert (await call(on_b, "list_workspace", session_id=session))["session_id"] == session
        await call(on_a, "end_session", session_id=session)
        for client in (on_a, on_b):
            message = await refused(client, "list_workspace", session_id=session)
            assert f"unknown session {session!r}" in message


async def test_a_session_used_on_one_server_is_not_expired_by_the_other(
    make_server: Callable[..., MCPServer],
) -> None:
    """Idle expiry reads the record: a session kept busy on B outlives A's idle clock."""
    now = [time.time()]
    policy = {"sessions": {"idle_ttl_s": 60, "max_lifetime_s": 3600}}
    a = make_server(policy, clock=lambda: now[0])
    b = make_server(policy, clock=lambda: now[0])
    async with Client(a) as on_a, Client(b) as on_b:
        session = (await call(on_a, "list_workspace", session_id="new"))["session_id"]
        for _ in range(3):
            now[0] += 40
            await call(on_b, "list_workspace", session_id=session)
        # 120 s after A last saw it, but 40 s after B's last call: still live on both.
        assert (await call(on_a, "list_workspace", session_id=session))["session_id"] == session


@pytest.mark.docker
async def test_a_capability_granted_on_one_server_is_used_and_revoked_on_the_other(
    make_server: Callable[..., MCPServer],
    data_dir: Path,
    upstream: Upstream,
    upstream_ca_file: Path,
) -> None:
    Vault(vault_path(data_dir), load_key(data_dir, {})).set("api_token", "sk-fleet", ["localhost"])
    api = {
        "hosts": ["localhost"],
        "ports": [upstream.port],
        "methods": ["GET"],
        "paths": ["/api/**"],
        "secret": "api_token",
        "inject": {"header": "Authorization", "format": "Bearer {secret}"},
        "approval": "auto",
        "allow_private": ["127.0.0.0/8", "::1/128"],
    }
    policy = {"capabilities": {"api": api}, "egress": {"upstream_ca_file": str(upstream_ca_file)}}
    code = (
        "import urllib.request\n"
        f"print(urllib.request.urlopen('https://localhost:{upstream.port}/api/x').status)\n"
    )
    a, b = make_server(policy), make_server(policy)
    async with Client(a) as on_a, Client(b) as on_b:
        granted = await call(
            on_a, "request_capability", session_id="new", capability="api", reason="test"
        )
        session, cap = granted["session_id"], granted["capability_id"]
        ran = await call(on_b, "run_code", session_id=session, code=code, capabilities=[cap])
        assert ran["stdout"]["text"] == "200\n", ran
        assert [s.all("Authorization") for s in upstream.seen] == [["Bearer sk-fleet"]]
        revoked = await call(on_b, "revoke_capability", session_id=session, capability_id=cap)
        assert revoked["revoked"] is True
        message = await refused(on_b, "run_code", session_id=session, code=code, capabilities=[cap])
        assert "unknown, expired or revoked" in message
        other = (await call(on_b, "list_workspace", session_id="new"))["session_id"]
        foreign = await refused(on_b, "run_code", session_id=other, code=code, capabilities=[cap])
        assert "unknown, expired or revoked" in foreign


@pytest.mark.docker
async def test_a_grant_is_not_used_where_the_policy_no_longer_grants_its_scope(
    make_server: Callable[..., MCPServer],
) -> None:
    """A replica whose policy narrowed the capability (or dropped it) holds no such grant:
    what reaches the network is what this server's policy would grant now."""
    wide = {
        "hosts": ["api.example"],
        "ports": [443, 8443],
        "methods": ["GET"],
        "paths": ["/**"],
        "approval": "auto",
    }
    a = make_server({"capabilities": {"api": wide}})
    b = make_server({"capabilities": {"api": wide | {"ports": [443]}}})
    c = make_server({})
    async with Client(a) as on_a, Client(b) as on_b, Client(c) as on_c:
        granted = await call(
            on_a, "request_capability", session_id="new", capability="api", reason="test"
        )
        session, cap = granted["session_id"], granted["capability_id"]
        for client in (on_b, on_c):
            message = await refused(
                client, "run_code", session_id=session, code="pass", capabilities=[cap]
            )
            assert "unknown, expired or revoked" in message
