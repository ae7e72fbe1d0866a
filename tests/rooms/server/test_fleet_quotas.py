"""A tenant's quotas count on every server sharing its records, not per process: two real
servers on one data dir (two processes' worth: each its own leases, broker and claim), one
SQLite file, driven with the SDK's in-memory client. With the records in PostgreSQL the
same counting runs under the store's transaction there (docs/fleet.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from mcp.client import Client
from mcp.types import CallToolResult
from support import running, text_of, wait_for_containers

from airlock.policies import Policy
from airlock.server import Config, build_server

pytestmark = pytest.mark.anyio

CAP = {
    "description": "a host nobody reaches in this test",
    "hosts": ["api.example.com"],
    "methods": ["GET"],
    "paths": ["/**"],
    "approval": "auto",
    "ttl": "5m",
    "max_ttl": "10m",
}
LONG_RUN = "import time; print('x', flush=True); time.sleep(60)"


def server(data_dir: Path, policy: dict[str, Any]) -> Any:
    return build_server(Config(data_dir=data_dir), Policy.model_validate(policy))


async def ask(c: Client) -> CallToolResult:
    with anyio.fail_after(60):
        return await c.call_tool(
            "request_capability", {"capability": "example", "reason": "quota test"}
        )


async def test_the_live_capability_quota_of_a_tenant_counts_every_servers_grants(
    data_dir: Path,
) -> None:
    policy = {"capabilities": {"example": CAP}, "broker": {"max_live_grants_per_tenant": 1}}
    async with Client(server(data_dir, policy)) as a, Client(server(data_dir, policy)) as b:
        first = await ask(a)
        assert not first.is_error, text_of(first)
        refused = await ask(b)
        assert refused.is_error
        message = text_of(refused)
        assert "across the servers sharing these records" in message
        assert "max_live_per_tenant = 1" in message
        # Revoked on the first server: the second may grant it now.
        assert first.structured_content is not None
        cap = first.structured_content["capability_id"]
        with anyio.fail_after(60):
            revoked = await a.call_tool("revoke_capability", {"capability_id": cap})
        assert not revoked.is_error, text_of(revoked)
        again = await ask(b)
        assert not again.is_error, text_of(again)


@pytest.mark.docker
async def test_the_concurrent_run_limit_of_a_tenant_counts_every_servers_runs(
    make_server: Callable[..., Any], docker_client: docker.DockerClient
) -> None:
    policy = {"tenants": {"max_concurrent_runs": 1}}
    async with Client(make_server(policy)) as a, Client(make_server(policy)) as b:
        with anyio.fail_after(60):
            warm = await a.call_tool("run_code", {"code": "print(1)"})
        assert warm.structured_content is not None, text_of(warm)
        session_id = warm.structured_content["session_id"]
        label = f"airlock.session={session_id}"
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.call_tool, "run_code", {"code": LONG_RUN, "session_id": session_id})
            await wait_for_containers(docker_client, label, running(1), within=60)
            with anyio.fail_after(60):
                refused = await b.call_tool("run_code", {"code": "print(1)"})
            tg.cancel_scope.cancel()
        assert refused.is_error
        assert "1 runs of this tenant are already running across the servers" in text_of(refused)
        with anyio.fail_after(60):
            after = await b.call_tool("run_code", {"code": "print(1)"})
        assert not after.is_error, text_of(after)
