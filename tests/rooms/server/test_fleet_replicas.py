"""Replicas that share nothing but their PostgreSQL and the vault key: each its own data
directory (so no blob, vault or claim file in common), any of them serving any call.

A run on A leaves files; B lists, reads and fetches them (their bytes come from the fleet's
blob store); a secret set through B's store reaches a run on A; a replica started with
another vault key than the fleet's is refused at start with the fix named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import text_of, vault_key_file

from airlock.broker.vault import KEY_FILE_ENV
from airlock.errors import VaultError
from airlock.policies import Policy
from airlock.server import Config, build_server
from airlock.server.running import serving
from airlock.store import Database

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


@pytest.fixture
def replica(
    tmp_path: Path, postgres_url: str, sandbox_runtime: str, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], MCPServer]:
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "fleet.key")))
    policy = Policy.model_validate({"sandbox": {"runtime": sandbox_runtime}, "pool": {"size": 0}})

    def make(name: str) -> MCPServer:
        config = Config(data_dir=tmp_path / name, store_url=postgres_url)
        return build_server(config, policy)

    return make


async def test_files_a_run_left_on_one_replica_are_read_on_another(
    replica: Callable[[str], MCPServer], tmp_path: Path
) -> None:
    async with Client(replica("a")) as on_a, Client(replica("b")) as on_b:
        ran = await call(
            on_a,
            "run_code",
            session_id="new",
            language="bash",
            code="head -c 3000000 /dev/zero | tr '\\0' x > big.txt; echo hi > note.txt",
        )
        session, run_id = ran["session_id"], ran["run_id"]
        read = await on_b.call_tool(
            "read_workspace_file", {"session_id": session, "path": "note.txt"}
        )
        assert not read.is_error and "hi" in text_of(read), text_of(read)
        fetched = await call(
            on_b, "fetch_artifact", session_id=session, run_id=run_id, path="big.txt",
            offset=2_999_990, max_bytes=100,
        )  # fmt: skip
        assert fetched["size"] == 3_000_000
        again = await call(
            on_b, "run_code", session_id=session, language="bash", code="wc -c < big.txt"
        )
        assert again["stdout"]["text"].strip() == "3000000"
    # Neither data directory holds a blob: the bytes live in the fleet's database.
    for name in ("a", "b"):
        blobs = tmp_path / name / "blobs"
        held = [p for p in blobs.rglob("*") if p.is_file()] if blobs.exists() else []
        assert held == [], held


async def test_a_replica_with_another_vault_key_is_refused_at_start(
    replica: Callable[[str], MCPServer],
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Client(replica("a")) as on_a:
        await call(on_a, "list_workspace", session_id="new")  # the first replica marks the vault
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "other.key")))
    config = Config(data_dir=tmp_path / "c", store_url=postgres_url)
    with pytest.raises(VaultError) as info:
        async with serving(config, Policy(), tenant_policies={}, clock=lambda: 0.0):
            pass
    assert "same key file" in str(info.value) and KEY_FILE_ENV in str(info.value)
    db = await Database.open(postgres_url)
    try:
        assert await db.list_runs(limit=10) == []  # nothing half-written by the refused one
    finally:
        await db.close()


async def test_a_replica_that_shuts_down_leaves_its_sessions_to_the_others(
    replica: Callable[[str], MCPServer], postgres_url: str
) -> None:
    async with Client(replica("b")) as on_b:
        async with Client(replica("a")) as on_a:
            ran = await call(
                on_a, "run_code", session_id="new", language="bash", code="echo kept > f.txt"
            )
            session = ran["session_id"]
        # A is gone (its lifespan ended); the session lives on at B, files and all.
        again = await call(on_b, "run_code", session_id=session, language="bash", code="cat f.txt")
        assert again["stdout"]["text"] == "kept\n"
    db = await Database.open(postgres_url)
    try:
        record = await db.get_session(session)
    finally:
        await db.close()
    assert record is not None
    # B's own shutdown leaves it too: only end_session or expiry ends a fleet's session.
    assert record.ended_at is None
