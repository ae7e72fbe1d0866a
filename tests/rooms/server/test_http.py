"""Airlock over Streamable HTTP, as a remote orchestrator sees it: a real uvicorn subprocess."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import anyio
import docker
import httpx
import pytest
from mcp import MCPError
from support import (
    AIRLOCK,
    airlock_async,
    client,
    free_port,
    http_server,
    make_wheel,
    text_of,
    wait_until,
)

from airlock.server.auth import generate_api_key

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])


async def test_requests_without_a_valid_token_get_401(tmp_path: Path) -> None:
    async with http_server(tmp_path) as server, httpx.AsyncClient() as probe:
        health = await probe.get(f"{server.base}/healthz")
        # Probes need no token either (one server on SQLite: ready once serving).
        alive = await probe.get(f"{server.base}/livez")
        ready = await probe.get(f"{server.base}/readyz")
        missing = await probe.post(server.url, json={})
        wrong = await probe.post(
            server.url, json={}, headers={"Authorization": "Bearer alk_not-a-key"}
        )
    assert health.status_code == 200
    assert (alive.status_code, ready.status_code) == (200, 200)
    assert ready.json() == {"status": "ready"}
    assert missing.status_code == 401
    assert wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer ")
    # API keys only: no authorization server exists, so no RFC 9728 metadata points at one.
    assert "resource_metadata" not in missing.headers["www-authenticate"]


async def test_foreign_host_header_is_refused(tmp_path: Path) -> None:
    async with http_server(tmp_path) as server, httpx.AsyncClient() as probe:
        response = await probe.post(
            server.url,
            json={},
            headers={"Authorization": f"Bearer {server.keys['acme']}", "Host": "evil.example"},
        )
    assert response.status_code == 421


async def test_refuses_a_public_address_without_auth(tmp_path: Path) -> None:
    result = await airlock_async(
        "serve", "--http", "--host", "0.0.0.0", "--data-dir", str(tmp_path)
    )
    assert result.returncode == 1
    assert "without authentication" in result.stderr


@MODES
async def test_tenants_cannot_see_each_others_runs_sessions_or_capabilities(
    tmp_path: Path, mode: str
) -> None:
    async with (
        http_server(tmp_path) as server,
        client(server, "acme", mode) as acme,
        client(server, "globex", mode) as globex,
    ):
        ran = await acme.call_tool("run_code", {"code": "open('secret.txt','w').write('acme')"})
        assert ran.structured_content is not None
        run_id = ran.structured_content["run_id"]
        session = ran.structured_content["session_id"]
        own = await acme.call_tool("fetch_artifact", {"run_id": run_id, "path": "secret.txt"})
        theirs = await globex.call_tool("fetch_artifact", {"run_id": run_id, "path": "secret.txt"})
        never = await globex.call_tool(
            "fetch_artifact", {"run_id": "run_" + "a" * 26, "path": "secret.txt"}
        )
        reuse = await globex.call_tool("run_code", {"code": "print(1)", "session_id": session})
        end = await globex.call_tool("end_session", {"session_id": session})
        revoke = await globex.call_tool(
            "revoke_capability", {"capability_id": f"tenant/acme/session/{session}/cap/x"}
        )
        # Another tenant's workspace reads exactly like a session that never existed.
        never_session = "ses_" + "a" * 26
        peeks = {}
        for tool, args in (
            ("list_workspace", {}),
            ("read_workspace_file", {"path": "secret.txt"}),
        ):
            foreign = await globex.call_tool(tool, {**args, "session_id": session})
            unknown = await globex.call_tool(tool, {**args, "session_id": never_session})
            peeks[tool] = (foreign, unknown)
        resource_errors = []
        for sid in (session, never_session):
            with pytest.raises(MCPError) as caught:
                await globex.read_resource(f"airlock://sessions/{sid}/workspace/secret.txt")
            resource_errors.append(str(caught.value).replace(sid, "ID"))
        own_file = await acme.call_tool(
            "read_workspace_file", {"path": "secret.txt", "session_id": session}
        )
        still = await acme.call_tool(
            "run_code", {"code": "print(open('secret.txt').read())", "session_id": session}
        )
    assert not own.is_error
    assert theirs.is_error
    assert text_of(theirs).replace(run_id, "ID") == text_of(never).replace("run_" + "a" * 26, "ID")
    assert reuse.is_error and "unknown session" in text_of(reuse)
    assert end.is_error and "unknown session" in text_of(end)
    assert revoke.is_error
    for foreign, unknown in peeks.values():
        assert foreign.is_error and "acme" not in text_of(foreign)
        assert text_of(foreign).replace(session, "ID") == text_of(unknown).replace(
            never_session, "ID"
        )
    assert resource_errors[0] == resource_errors[1]
    assert "acme" in text_of(own_file)
    assert still.structured_content is not None
    assert still.structured_content["stdout"]["text"] == "acme\n"


@MODES
async def test_sigterm_ends_every_lease_and_removes_containers(
    tmp_path: Path, mode: str, docker_client: docker.DockerClient
) -> None:
    session = ""
    async with http_server(tmp_path, pool=False) as server:
        # The client loses its server mid-call; only what the server did matters here.
        with contextlib.suppress(Exception):
            async with client(server, "acme", mode) as acme:
                first = await acme.call_tool("run_code", {"code": "print(1)"})
                assert first.structured_content is not None
                session = first.structured_content["session_id"]

                async def long_call() -> None:
                    await acme.call_tool(
                        "run_code", {"code": "import time; time.sleep(60)", "session_id": session}
                    )

                async with anyio.create_task_group() as tg:
                    tg.start_soon(long_call)
                    await wait_until(
                        lambda: docker_client.containers.list(
                            filters={"label": f"airlock.session={session}"}, ignore_removed=True
                        )
                    )
                    server.process.send_signal(signal.SIGTERM)
                    with anyio.fail_after(60):
                        await server.process.wait()
                    tg.cancel_scope.cancel()
    assert session
    assert server.process.returncode == 0
    assert (
        docker_client.containers.list(
            all=True, filters={"label": f"airlock.session={session}"}, ignore_removed=True
        )
        == []
    )


async def test_closing_a_handshake_era_connection_ends_its_leases(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    async with http_server(tmp_path) as server:
        async with client(server, "acme", "legacy") as acme:
            ran = await acme.call_tool("run_code", {"code": "open('f','w').write('x')"})
            assert ran.structured_content is not None
            session = ran.structured_content["session_id"]
        # The client sent DELETE on close; the lease ended with the connection.
        async with client(server, "acme", "auto") as again:
            reuse = await again.call_tool("run_code", {"code": "print(1)", "session_id": session})
    assert reuse.is_error
    assert "unknown session" in text_of(reuse)


async def test_modern_era_leases_outlive_each_request(tmp_path: Path) -> None:
    async with http_server(tmp_path) as server, client(server, "acme", "auto") as acme:
        first = await acme.call_tool("run_code", {"code": "open('f','w').write('kept')"})
        assert first.structured_content is not None
        session = first.structured_content["session_id"]
        second = await acme.call_tool(
            "run_code", {"code": "print(open('f').read())", "session_id": session}
        )
    assert second.structured_content is not None
    assert second.structured_content["stdout"]["text"] == "kept\n"


async def test_each_tenant_gets_the_policy_of_its_key(tmp_path: Path) -> None:
    strict = "[limits]\ntimeout_s = 5\nmax_timeout_s = 5\n"
    async with (
        http_server(tmp_path, tenant_policies={"globex": strict}) as server,
        client(server, "acme", "auto") as acme,
        client(server, "globex", "auto") as globex,
    ):
        allowed = await acme.call_tool("run_code", {"code": "print(1)", "timeout_s": 10})
        refused = await globex.call_tool("run_code", {"code": "print(1)", "timeout_s": 10})
    assert not allowed.is_error
    assert refused.is_error
    assert "policy maximum of 5" in text_of(refused)


@MODES
async def test_a_client_that_disconnects_mid_call_gets_its_container_removed(
    tmp_path: Path, mode: str, docker_client: docker.DockerClient
) -> None:
    async with http_server(tmp_path, pool=False) as server:
        async with client(server, "acme", mode) as acme:
            first = await acme.call_tool("run_code", {"code": "print(1)"})
            assert first.structured_content is not None
            session = first.structured_content["session_id"]
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    acme.call_tool,
                    "run_code",
                    {"code": "import time; time.sleep(60)", "session_id": session},
                )
                await wait_until(
                    lambda: docker_client.containers.list(
                        filters={"label": f"airlock.session={session}"}, ignore_removed=True
                    )
                )
                tg.cancel_scope.cancel()
        await wait_until(
            lambda: (
                not docker_client.containers.list(
                    all=True, filters={"label": f"airlock.session={session}"}, ignore_removed=True
                )
            ),
            within=30,
        )
        assert server.process.returncode is None


async def test_a_sigkilled_http_server_leaves_nothing_after_the_next_start(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    session = ""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with http_server(tmp_path / "a", pool=False) as first:
        with contextlib.suppress(Exception):
            async with client(first, "acme", "auto") as acme:
                started = await acme.call_tool("run_code", {"code": "print(1)"})
                assert started.structured_content is not None
                session = started.structured_content["session_id"]
                first_run = started.structured_content["run_id"]
                async with anyio.create_task_group() as tg:
                    tg.start_soon(
                        acme.call_tool,
                        "run_code",
                        {"code": "import time; time.sleep(120)", "session_id": session},
                    )
                    # The long run's container, not the first call's (removed after its reply).
                    await wait_until(
                        lambda: [
                            c
                            for c in docker_client.containers.list(
                                filters={"label": f"airlock.session={session}"},
                                ignore_removed=True,
                            )
                            if c.labels.get("airlock.run") != first_run
                        ]
                    )
                    first.process.kill()
                    await first.process.wait()
                    tg.cancel_scope.cancel()
    survivors = docker_client.containers.list(
        all=True, filters={"label": f"airlock.session={session}"}, ignore_removed=True
    )
    try:
        assert survivors, "a SIGKILLed server cannot clean up; its container must still be there"
        async with http_server(tmp_path / "b", pool=False), httpx.AsyncClient():
            await wait_until(
                lambda: (
                    not docker_client.containers.list(
                        all=True,
                        filters={"label": f"airlock.session={session}"},
                        ignore_removed=True,
                    )
                ),
                within=30,
            )
    finally:
        for container in survivors:
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


async def test_a_tenant_policy_brings_its_own_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # globex's lock pins a wheel (found only in a local directory, no index) with a wrong
    # hash: its image cannot be built, while acme keeps the server's image.
    index = tmp_path / "index"
    index.mkdir()
    make_wheel(index)
    lock = tmp_path / "globex.lock"
    lock.write_text(f"airlock-probe==1.0 --hash=sha256:{'0' * 64}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    own = f'[image]\npython_lock = "{lock}"\n'
    async with (
        http_server(tmp_path, tenant_policies={"globex": own}) as server,
        client(server, "acme", "auto") as acme,
        client(server, "globex", "auto") as globex,
    ):
        allowed = await acme.call_tool("run_code", {"code": "print(1)"})
        assert not allowed.is_error
        building = await globex.call_tool("run_code", {"code": "print(1)"})
        assert building.is_error
        assert "the sandbox image is being built" in text_of(building)
        with anyio.fail_after(120):
            refused = building
            while "being built" in text_of(refused):
                await anyio.sleep(0.2)
                refused = await globex.call_tool("run_code", {"code": "print(1)"})
        assert refused.is_error
        assert "airlock-probe==1.0" in text_of(refused)
        assert not (await acme.call_tool("run_code", {"code": "print(2)"})).is_error


async def test_a_tenant_policy_naming_a_missing_lock_file_stops_startup(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    policy = tmp_path / "globex.toml"
    policy.write_text(f'[image]\npython_lock = "{tmp_path / "absent.lock"}"\n')
    auth = tmp_path / "auth.toml"
    key_hash = generate_api_key()[1]
    auth.write_text(
        f'[[keys]]\nid = "g"\ntenant = "globex"\nhash = "{key_hash}"\npolicy = "{policy}"\n'
    )
    done = await anyio.run_process(
        [
            AIRLOCK,
            "serve",
            "--http",
            "--port",
            str(free_port()),
            "--auth",
            str(auth),
            "--data-dir",
            str(tmp_path / "data"),
        ],
        check=False,
    )
    assert done.returncode != 0
    assert "cannot read the Python lock file" in done.stderr.decode()
