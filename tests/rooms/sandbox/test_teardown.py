"""Session teardown against the real engine: cancellation, end_session, shutdown.

Each test drives a server built in the test with the SDK's in-memory client and
watches the containers through the engine, by the labels Airlock puts on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import docker
import pytest
from mcp.client import Client
from mcp.types import CallToolResult
from support import NO_POOL, containers, none_left, running, text_of, wait_for_containers

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

# Prints once it runs, then outlives every wait in these tests.
LONG_RUN = "import time; print('x', flush=True); time.sleep(60)"
# Container start is seconds; removal with force is about one.
APPEAR_S = 60
VANISH_S = 20


async def start_session(client: Client, docker_client: docker.DockerClient) -> str:
    """Make a quick call in the default session and return that session's id, once the
    call's own container (removed right after its reply) is gone, so later counts of the
    session's containers see only the calls that follow."""
    result = await client.call_tool("run_code", {"code": "print('ready')"})
    assert result.structured_content is not None, text_of(result)
    assert result.structured_content["status"] == "ok", text_of(result)
    session_id: str = result.structured_content["session_id"]
    run_label = f"airlock.run={result.structured_content['run_id']}"
    await wait_for_containers(docker_client, run_label, none_left, within=VANISH_S)
    return session_id


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_cancelled_call_has_its_container_removed_and_server_keeps_serving(
    make_server: Callable[..., Any], docker_client: docker.DockerClient, mode: str
) -> None:
    async with Client(make_server(NO_POOL), mode=mode) as client:
        session_id = await start_session(client, docker_client)
        label = f"airlock.session={session_id}"
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "run_code", {"code": LONG_RUN})
            await wait_for_containers(docker_client, label, running(1), within=APPEAR_S)
            tg.cancel_scope.cancel()

        await wait_for_containers(docker_client, label, none_left, within=VANISH_S)
        after = await client.call_tool("run_code", {"code": "print('still serving')"})
        assert after.structured_content is not None, text_of(after)
        assert after.structured_content["status"] == "ok", text_of(after)
        assert after.structured_content["session_id"] == session_id


async def test_end_session_removes_every_container_and_fails_the_pending_calls(
    make_server: Callable[..., Any], docker_client: docker.DockerClient
) -> None:
    async with Client(make_server(NO_POOL), mode="auto") as client:
        session_id = await start_session(client, docker_client)
        label = f"airlock.session={session_id}"
        pending: list[CallToolResult] = []

        async def long_call() -> None:
            args = {"code": LONG_RUN, "session_id": session_id}
            pending.append(await client.call_tool("run_code", args))

        with anyio.fail_after(APPEAR_S + VANISH_S):
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(long_call)
                await wait_for_containers(docker_client, label, running(3), within=APPEAR_S)
                ended = await client.call_tool("end_session", {"session_id": session_id})

        assert not ended.is_error, text_of(ended)
        assert ended.structured_content is not None
        assert ended.structured_content["session_id"] == session_id
        assert ended.structured_content["containers_removed"] == 3
        assert ended.structured_content["ended"] is True
        assert await containers(docker_client, label) == []
        assert len(pending) == 3
        for result in pending:
            assert result.is_error, text_of(result)
            assert "ended" in text_of(result)

        stale = await client.call_tool("run_code", {"code": "print(1)", "session_id": session_id})
        assert stale.is_error
        assert "unknown session" in text_of(stale)

        fresh = await client.call_tool("run_code", {"code": "print(1)"})
        assert fresh.structured_content is not None, text_of(fresh)
        assert fresh.structured_content["status"] == "ok", text_of(fresh)
        assert fresh.structured_content["session_id"] != session_id


async def test_workspace_files_persist_within_a_session_and_do_not_reach_the_next(
    make_server: Callable[..., Any],
) -> None:
    async with Client(make_server(), mode="auto") as client:
        wrote = await client.call_tool(
            "run_code", {"code": "open('note.txt', 'w').write('from A')"}
        )
        assert wrote.structured_content is not None, text_of(wrote)
        session_a = wrote.structured_content["session_id"]

        read = await client.call_tool(
            "run_code", {"code": "print(open('note.txt').read())", "session_id": session_a}
        )
        assert read.structured_content is not None, text_of(read)
        assert read.structured_content["stdout"]["text"] == "from A\n"

        await client.call_tool("end_session", {"session_id": session_a})

        probe = await client.call_tool(
            "run_code", {"code": "import os; print(sorted(os.listdir('.')))"}
        )
        assert probe.structured_content is not None, text_of(probe)
        assert probe.structured_content["session_id"] != session_a
        assert probe.structured_content["status"] == "ok", text_of(probe)
        assert "note.txt" not in probe.structured_content["stdout"]["text"]


async def test_artifacts_of_an_ended_session_stay_fetchable(
    make_server: Callable[..., Any],
) -> None:
    async with Client(make_server(), mode="auto") as client:
        wrote = await client.call_tool("run_code", {"code": "open('note.txt', 'w').write('kept')"})
        assert wrote.structured_content is not None, text_of(wrote)
        run_id = wrote.structured_content["run_id"]
        await client.call_tool("end_session", {})

        fetched = await client.call_tool("fetch_artifact", {"run_id": run_id, "path": "note.txt"})
        assert not fetched.is_error, text_of(fetched)
        assert "kept" in text_of(fetched)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_server_shutdown_during_a_call_leaves_no_container_of_its_instance(
    make_server: Callable[..., Any], docker_client: docker.DockerClient, mode: str
) -> None:
    outcome: list[object] = []

    async def long_call(client: Client) -> None:
        try:
            outcome.append(await client.call_tool("run_code", {"code": LONG_RUN}))
        except Exception as exc:  # the connection closing under the call is a fine ending
            outcome.append(exc)

    with anyio.fail_after(APPEAR_S + 2 * VANISH_S):
        async with (
            anyio.create_task_group() as tg,
            Client(make_server(NO_POOL), mode=mode) as client,
        ):
            session_id = await start_session(client, docker_client)
            tg.start_soon(long_call, client)
            [box] = await wait_for_containers(
                docker_client, f"airlock.session={session_id}", running(1), within=APPEAR_S
            )
            instance = box.labels["airlock.instance"]

    assert len(outcome) == 1, "the pending call neither returned nor failed"
    await wait_for_containers(
        docker_client, f"airlock.instance={instance}", none_left, within=VANISH_S
    )
