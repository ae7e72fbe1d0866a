"""A fleet of real `airlock serve --http` replicas on one PostgreSQL, driven by the official
MCP client over HTTP: a replica SIGKILLed mid-run loses nothing that the others cannot carry
on. Its run is ended `killed` by a live replica, its session goes on there with its files,
and its container is reaped when a server starts again on that engine."""

from __future__ import annotations

import contextlib
import signal
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
    tmp_path: Path,
    postgres_url: str,
    docker_client: docker.DockerClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEY_FILE_ENV, str(vault_key_file(tmp_path / "fleet.key")))
    # The URL holds the test database's password, which --store refuses.
    monkeypatch.setenv("AIRLOCK_STORE_URL", postgres_url)
    policy = tmp_path / "policy.toml"
    policy.write_text(NO_POOL_TOML)

    def replica(name: str) -> Any:
        args = ("--data-dir", str(tmp_path / name), "--policy", str(policy))
        return serving_http(*args)

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
