"""A fleet of real `airlock serve --http` replicas on one PostgreSQL, driven by the official
MCP client over HTTP: a replica SIGKILLed mid-run loses nothing that the others cannot carry
on. Its run is ended `killed` by a live replica, its session goes on there with its files,
and its container is reaped when a server starts again on that engine. A handshake-era
client's "new" session outlives its connection on every replica; only the connection's
default session ends with it."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from mcp.client import Client
from support import NO_POOL_TOML, serving_http, text_of, vault_key_file, wait_until

from airlock.broker.vault import KEY_FILE_ENV
from airlock.store import Database

pytestmark = [pytest.mark.anyio, pytest.mark.docker]


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    return dict(result.structured_content)


@pytest.fixture
def replica(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], Any]:
    """`airlock serve --http` replicas of one fleet, each with its own data directory."""
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "fleet.key")))
    # The URL holds the test database's password, which --store refuses.
    monkeypatch.setenv("AIRLOCK_STORE_URL", postgres_url)
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_POOL_TOML)

    def make(name: str) -> Any:
        return serving_http("--data-dir", str(tmp_path / name), "--policy", str(policy))

    return make


async def session_of(client: Client, session_id: str | None = None) -> str:
    args = {} if session_id is None else {"session_id": session_id}
    return str((await call(client, "list_workspace", **args))["session_id"])


async def test_a_legacy_clients_new_session_outlives_its_connection_on_every_replica(
    replica: Callable[[str], Any],
) -> None:
    """A 2025-11-25 (handshake-era) client on A asks for a session by "new" and goes away:
    B serves that session; only A's connection default ended with the connection."""
    async with replica("a") as a, replica("b") as b:
        async with Client(f"{a.base}/mcp", mode="legacy") as on_a:
            default = await session_of(on_a)
            asked = await session_of(on_a, "new")
        async with Client(f"{b.base}/mcp", mode="legacy") as on_b:
            assert await session_of(on_b, asked) == asked
            gone = await on_b.call_tool("list_workspace", {"session_id": default})
            assert gone.is_error and "unknown session" in text_of(gone), text_of(gone)
        # Nor does B's connection closing end it: the agent's, not the connection's.
        async with Client(f"{a.base}/mcp", mode="legacy") as on_a:
            assert await session_of(on_a, asked) == asked
            ended = await call(on_a, "end_session", session_id=asked)
            assert ended["session_id"] == asked and ended["ended"], ended


async def _sigkilled_mid_run(serving: Any, docker_client: docker.DockerClient) -> tuple[str, str]:
    """Start a session on a replica, SIGKILL the replica while a run of it sleeps; the
    session and that run. The client's errors once its server is gone are expected."""
    found: dict[str, str] = {}
    with contextlib.suppress(Exception):
        async with serving as a, Client(f"{a.base}/mcp") as on_a:
            first = await call(on_a, "run_code", language="bash", code="echo kept > f.txt")
            found["session"] = session = first["session_id"]

            async def sleeper() -> None:
                with contextlib.suppress(Exception):
                    await on_a.call_tool(
                        "run_code", {"code": "import time; time.sleep(120)", "session_id": session}
                    )

            async with anyio.create_task_group() as tg:
                tg.start_soon(sleeper)
                [held] = await wait_until(
                    lambda: [
                        c
                        for c in docker_client.containers.list(
                            filters={"label": f"airlock.session={session}"},
                            ignore_removed=True,
                        )
                        if c.labels.get("airlock.run") != first["run_id"]
                    ]
                )
                found["run"] = held.labels["airlock.run"]
                a.process.send_signal(signal.SIGKILL)
                await a.process.wait()
                tg.cancel_scope.cancel()
    assert found.keys() == {"session", "run"}, f"the run never started: {found}"
    return found["session"], found["run"]


async def test_a_replica_sigkilled_mid_run_loses_nothing_the_others_cannot_carry_on(
    replica: Callable[[str], Any], postgres_url: str, docker_client: docker.DockerClient
) -> None:
    async with replica("b") as b, Client(f"{b.base}/mcp") as on_b:
        session, long_run = await _sigkilled_mid_run(replica("a"), docker_client)
        # A live replica finds the dead one's claim free and ends its run `killed`.
        db = await Database.open(postgres_url)
        try:

            async def killed() -> bool:
                record = await db.get_run(long_run)
                return record is not None and record.status == "killed"

            for _ in range(120):  # polled: the ending is another process's, within a sweep
                if await killed():
                    break
                await anyio.sleep(0.5)
            else:
                pytest.fail(f"run {long_run} of the SIGKILLed replica was not ended within 60 s")
        finally:
            await db.close()
        # The session goes on at B, files and all.
        again = await call(on_b, "run_code", session_id=session, language="bash", code="cat f.txt")
        assert again["stdout"]["text"] == "kept\n"
    # A server that starts again on this engine reaps the dead replica's container.
    async with replica("c"):
        await wait_until(
            lambda: (
                not docker_client.containers.list(
                    all=True, filters={"label": f"airlock.run={long_run}"}, ignore_removed=True
                )
            ),
            within=60,
        )
