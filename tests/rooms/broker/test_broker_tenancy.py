"""The broker's answers belong to the caller: its own session's grants, its own tenant's
quotas and offer. Driven through the SDK's client against the real server; no container
is needed, since the broker decides before any run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.types import CallToolResult
from support import call, text_of

from airlock.policies import Policy
from airlock.server import Config, build_server
from airlock.store import Database

pytestmark = pytest.mark.anyio

TENANT = "acme"


def capability(host: str) -> dict[str, Any]:
    return {
        "description": f"read {host}",
        "hosts": [host],
        "methods": ["GET"],
        "paths": ["/**"],
        "approval": "auto",
        "ttl": "5m",
        "max_ttl": "10m",
    }


SERVER_POLICY = {
    "capabilities": {"server-only-secret-api": capability("internal.example")},
    "broker": {"max_capabilities_per_session": 32, "max_live_grants_per_tenant": 64},
}
TENANT_POLICY = {
    "capabilities": {"tenant-api": capability("api.example")},
    "broker": {"max_capabilities_per_session": 1, "max_live_grants_per_tenant": 2},
}


def server(tmp_path: Path, *, http: bool = True) -> Any:
    return build_server(
        Config(data_dir=tmp_path / "data"),
        Policy.model_validate(SERVER_POLICY),
        http=http,
        tenant_policies={TENANT: Policy.model_validate(TENANT_POLICY)},
        local_tenant=TENANT,
    )


async def grant(c: Client, session_id: str | None = None) -> CallToolResult:
    args: dict[str, Any] = {"capability": "tenant-api", "reason": "test"}
    if session_id is not None:
        args["session_id"] = session_id
    return await call(c, "request_capability", args)


async def audited_revocation(tmp_path: Path, session_id: str) -> float | None:
    db = await Database.open(tmp_path / "data" / "airlock.db")
    try:
        (record,) = await db.list_grants(session_id=session_id, limit=10)
    finally:
        await db.close()
    return record.revoked_at


async def test_a_refused_revoke_of_another_sessions_capability_revokes_nothing(
    tmp_path: Path,
) -> None:
    one_each = {**TENANT_POLICY, "broker": {"max_capabilities_per_session": 1}}
    plain = build_server(
        Config(data_dir=tmp_path / "data"), Policy.model_validate(one_each), http=True
    )
    async with Client(plain) as c:
        a = await grant(c)
        assert not a.is_error, text_of(a)
        cap_a, session_a = a.structured_content["capability_id"], a.structured_content["session_id"]
        # Session B of the same tenant (a fresh lease) tries to revoke A's capability.
        b = await call(c, "list_workspace", {})
        session_b = b.structured_content["session_id"]
        assert session_b != session_a
        refused = await call(
            c, "revoke_capability", {"capability_id": cap_a, "session_id": session_b}
        )
        assert refused.is_error and "unknown capability id" in text_of(refused)
        # A's grant is still live: A's session is still at its quota of one...
        again = await grant(c, session_a)
        assert again.is_error and "max_per_session = 1" in text_of(again), text_of(again)
        # ...and the audit says so too, until A itself revokes it.
        assert await audited_revocation(tmp_path, session_a) is None
        mine = await call(c, "revoke_capability", {"capability_id": cap_a, "session_id": session_a})
        assert not mine.is_error, text_of(mine)
    assert await audited_revocation(tmp_path, session_a) is not None


async def test_the_tenants_own_quotas_hold_not_the_servers(tmp_path: Path) -> None:
    async with Client(server(tmp_path)) as c:
        first = await grant(c)
        assert not first.is_error, text_of(first)
        session = first.structured_content["session_id"]
        second = await grant(c, session)
        assert second.is_error and "max_per_session = 1" in text_of(second), text_of(second)
        other = await grant(c)  # a new lease: the tenant's second live grant
        assert not other.is_error, text_of(other)
        third = await grant(c)
        assert third.is_error and "max_live_per_tenant = 2" in text_of(third), text_of(third)


async def test_the_request_capability_description_names_no_policys_offer(tmp_path: Path) -> None:
    async with Client(server(tmp_path)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    description = tools["request_capability"].description or ""
    assert "server-only-secret-api" not in description
    assert "internal.example" not in description
    assert "tenant-api" not in description  # the same text reaches every tenant
    assert "depends on your tenant's policy" in description


async def test_the_scope_shown_is_the_scope_granted_and_recorded(tmp_path: Path) -> None:
    """One scope, resolved once: the agent is shown what the broker enforces and the store
    records, for a passthrough tunnel too (any method, any path of its hosts)."""
    tunnel = {"hosts": ["db.example"], "ports": [5432], "tls": "passthrough", "approval": "auto"}
    policy = Policy.model_validate({"capabilities": {"tunnel": tunnel}})
    async with Client(build_server(Config(data_dir=tmp_path / "data"), policy)) as c:
        granted = await call(c, "request_capability", {"capability": "tunnel", "reason": "db"})
        assert not granted.is_error, text_of(granted)
        assert granted.structured_content is not None
        shown = granted.structured_content["scope"]
        session_id = granted.structured_content["session_id"]
    assert shown == {"hosts": ["db.example"], "ports": [5432], "methods": ["*"], "paths": ["/**"]}
    db = await Database.open(tmp_path / "data" / "airlock.db")
    try:
        (record,) = await db.list_grants(session_id=session_id, limit=10)
    finally:
        await db.close()
    assert record.scope == shown
