"""Tool behaviour through the SDK's in-memory client, in both protocol eras."""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import docker
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import BlobResourceContents, CallToolResult, EmbeddedResource, ResourceLink
from support import NO_POOL, none_left, run, running, text_of, wait_for_containers, wait_until

from airlock.sandbox.environment import sandbox_environment

pytestmark = [pytest.mark.anyio]

MakeServer = Callable[..., MCPServer]
MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])


@MODES
async def test_run_code_returns_the_contract_fields_and_an_envelope(
    make_server: MakeServer, mode: str, engine_runtimes: frozenset[str]
) -> None:
    # The runtime a new user gets ("auto"), named because the test harness defaults to runc.
    async with Client(make_server({"sandbox": {"runtime": "auto"}}), mode=mode) as client:
        result = await client.call_tool("run_code", {"code": "print('hello')"})
    data = result.structured_content
    assert data is not None
    assert re.fullmatch(r"run_[a-z2-7]{26}", data["run_id"])
    assert re.fullmatch(r"ses_[a-z2-7]{26}", data["session_id"])
    assert data["session_expires_at"].endswith("Z")
    # The default runtime "auto" picks gVisor wherever the engine has it.
    assert data["runtime"] == ("runsc" if "runsc" in engine_runtimes else "runc")
    assert data["status"] == "ok"
    assert data["exit_code"] == 0
    assert data["stdout"] == {
        "text": "hello\n",
        "bytes": 6,
        "truncated": False,
        "sha256": hashlib.sha256(b"hello\n").hexdigest(),
        "uri": f"airlock://runs/{data['run_id']}/artifacts/.airlock/stdout",
    }
    assert data["stderr"]["bytes"] == 0
    assert data["artifacts"] == []
    assert data["egress"] == []
    assert data["trust"] == "untrusted"
    assert data["usage"]["cpu_seconds"] > 0
    assert data["usage"]["peak_memory_bytes"] > 0
    text = text_of(result)
    nonce = re.search(r'stream="stdout" nonce="([0-9a-f]{16})"', text)
    assert nonce is not None
    assert f'hello\n</untrusted-output nonce="{nonce.group(1)}">' in text


@MODES
async def test_nonzero_exit_is_a_result_not_a_tool_error(
    make_server: MakeServer, mode: str
) -> None:
    async with Client(make_server(), mode=mode) as client:
        data = await run(client, "import sys; print('bad', file=sys.stderr); sys.exit(3)")
    assert data["status"] == "error"
    assert data["exit_code"] == 3
    assert data["stderr"]["text"] == "bad\n"


@pytest.mark.docker  # the box's own path and user
async def test_bash_runs_with_workspace_as_cwd(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        data = await run(client, 'echo "$0 in $(pwd) as $(id -u)"', language="bash")
    assert data["status"] == "ok"
    assert data["stdout"]["text"].endswith("in /workspace as 1000\n")


async def test_files_arrive_in_workspace_text_and_binary(make_server: MakeServer) -> None:
    blob = bytes(range(256))
    files = [
        {"path": "data/in.txt", "content": "héllo"},
        {"path": "bin/raw.dat", "content": base64.b64encode(blob).decode(), "encoding": "base64"},
    ]
    code = (
        "import hashlib\n"
        "print(open('data/in.txt', encoding='utf-8').read())\n"
        "print(hashlib.sha256(open('bin/raw.dat', 'rb').read()).hexdigest())\n"
    )
    async with Client(make_server()) as client:
        data = await run(client, code, files=files)
    assert data["stdout"]["text"] == f"héllo\n{hashlib.sha256(blob).hexdigest()}\n"
    assert data["artifacts"] == []  # files given by the call are inputs, not products


@MODES
async def test_workspace_persists_within_a_session_including_deletions(
    make_server: MakeServer, mode: str
) -> None:
    async with Client(make_server(), mode=mode) as client:
        first = await run(
            client, "open('keep.txt','w').write('k'); open('drop.txt','w').write('d')"
        )
        second = await run(
            client,
            "import os; print(sorted(os.listdir('.'))); os.remove('drop.txt')",
            session_id=first["session_id"],
        )
        third = await run(client, "import os; print(sorted(os.listdir('.')))")
    assert second["stdout"]["text"] == "['drop.txt', 'keep.txt']\n"
    assert third["stdout"]["text"] == "['keep.txt']\n"
    assert first["session_id"] == second["session_id"] == third["session_id"]


async def test_only_new_or_changed_files_become_artifacts(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        first = await run(client, "open('a.txt','w').write('1'); open('b.txt','w').write('1')")
        second = await run(client, "open('b.txt','w').write('2'); open('c.json','w').write('{}')")
    assert [a["path"] for a in first["artifacts"]] == ["a.txt", "b.txt"]
    artifacts = {a["path"]: a for a in second["artifacts"]}
    assert sorted(artifacts) == ["b.txt", "c.json"]
    assert artifacts["b.txt"]["sha256"] == hashlib.sha256(b"2").hexdigest()
    assert artifacts["c.json"]["mime_type"] == "application/json"
    assert artifacts["c.json"]["uri"] == (f"airlock://runs/{second['run_id']}/artifacts/c.json")


async def test_run_result_links_each_artifact(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        result = await client.call_tool("run_code", {"code": "open('out.csv','w').write('a,b')"})
    links = [block for block in result.content if isinstance(block, ResourceLink)]
    assert [link.name for link in links] == ["out.csv"]
    assert links[0].size == 3


@MODES
async def test_fetch_artifact_pages_through_text(make_server: MakeServer, mode: str) -> None:
    async with Client(make_server(), mode=mode) as client:
        data = await run(client, "open('log.txt','w').write('0123456789' * 10)")
        page = await client.call_tool(
            "fetch_artifact",
            {"run_id": data["run_id"], "path": "log.txt", "offset": 95, "max_bytes": 10},
        )
        first = await client.call_tool(
            "fetch_artifact", {"run_id": data["run_id"], "path": "log.txt", "max_bytes": 10}
        )
    assert page.structured_content is not None
    assert page.structured_content["offset"] == 95
    assert page.structured_content["returned_bytes"] == 5
    assert page.structured_content["truncated"] is False
    assert page.structured_content["size"] == 100
    assert "\n56789\n[bytes 95-100 of 100]\n</untrusted-output" in text_of(page)
    assert first.structured_content is not None
    assert first.structured_content["truncated"] is True
    assert "ask with offset=10 for more" in text_of(first)


async def test_fetch_artifact_returns_binary_as_embedded_blob(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        data = await run(client, "open('blob.bin','wb').write(bytes(range(256)))")
        result = await client.call_tool(
            "fetch_artifact", {"run_id": data["run_id"], "path": "blob.bin"}
        )
    embedded = result.content[0]
    assert isinstance(embedded, EmbeddedResource)
    assert isinstance(embedded.resource, BlobResourceContents)
    assert base64.b64decode(embedded.resource.blob) == bytes(range(256))
    assert embedded.resource.mime_type == "application/octet-stream"
    assert isinstance(result.content[1], ResourceLink)


async def test_full_stream_is_fetchable_when_truncated_inline(make_server: MakeServer) -> None:
    policy = {"output": {"inline_bytes": 100, "stream_cap_bytes": 100_000}}
    async with Client(make_server(policy)) as client:
        data = await run(client, "print('x' * 5000)")
        stream = await client.call_tool(
            "fetch_artifact",
            {"run_id": data["run_id"], "path": ".airlock/stdout", "max_bytes": 100_000},
        )
    assert data["stdout"]["truncated"] is True
    assert len(data["stdout"]["text"]) == 100
    assert data["stdout"]["uri"].endswith("/artifacts/.airlock/stdout")
    assert stream.structured_content is not None
    assert stream.structured_content["size"] == 5001


async def test_artifacts_are_readable_as_resources(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        data = await run(client, "import os; os.makedirs('d'); open('d/r.txt','w').write('res')")
        uri = data["artifacts"][0]["uri"]
        read = await client.read_resource(uri)
    assert uri.endswith("/artifacts/d/r.txt")
    content = read.contents[0]
    assert getattr(content, "text", "").count("\nres\n</untrusted-output") == 1


async def test_artifacts_outlive_the_session(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        data = await run(client, "open('stay.txt','w').write('still here')")
        ended = await client.call_tool("end_session", {"session_id": data["session_id"]})
        fetched = await client.call_tool(
            "fetch_artifact", {"run_id": data["run_id"], "path": "stay.txt"}
        )
        fresh = await run(client, "import os; print(os.listdir('.'))")
    assert not ended.is_error
    assert not fetched.is_error
    assert "still here" in text_of(fetched)
    assert fresh["session_id"] != data["session_id"]
    assert fresh["stdout"]["text"] == "[]\n"


async def test_unknown_session_is_a_tool_error(make_server: MakeServer) -> None:
    async with Client(make_server()) as client:
        result = await client.call_tool(
            "run_code", {"code": "print(1)", "session_id": "ses_" + "a" * 26}
        )
    assert result.is_error
    assert "unknown session" in text_of(result)


async def test_live_container_is_hardened(
    make_server: MakeServer, docker_client: docker.DockerClient
) -> None:
    async with Client(make_server(NO_POOL)) as client:
        warm = await run(client, "print(1)")
        session = warm["session_id"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, client, "import time; time.sleep(30)")
            found = await wait_until(
                lambda: docker_client.containers.list(
                    filters={"label": f"airlock.session={session}"}, ignore_removed=True
                )
            )
            attrs = found[0].attrs
            tg.cancel_scope.cancel()
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    # Only what the root runner needs to drop the code to uid 1000 and kill it; the code
    # itself runs with none (test_attacks checks that from inside).
    added = sorted(cap.removeprefix("CAP_") for cap in host["CapAdd"])
    assert added == ["KILL", "SETGID", "SETPCAP", "SETUID"]
    assert host["ReadonlyRootfs"] is True
    assert host["Privileged"] is False
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert not host.get("Binds")
    assert not attrs.get("Mounts")
    assert not host.get("Devices")
    if host["Runtime"] == "runsc":
        # gVisor: the code's task limit is RLIMIT_NPROC (its kernel enforces it); the host
        # cgroup leaves room for the Sentry's own threads; Airlock's seccomp filter applies.
        assert {"Name": "nproc", "Soft": 127, "Hard": 127} in host["Ulimits"]
        assert host["PidsLimit"] == 128 * 10 + 128
        assert any(opt.startswith("seccomp=") for opt in host["SecurityOpt"])
    else:
        assert host["Runtime"] == "runc"
        assert host["PidsLimit"] == 128
        # Docker's default seccomp profile: no override.
        assert not any(opt.startswith("seccomp=") for opt in host["SecurityOpt"])
    assert host["Memory"] == host["MemorySwap"] == 512 * 1024 * 1024
    assert (host["CpuPeriod"], host["CpuQuota"]) == (1_000_000, 1_000_000)
    assert not host["NanoCpus"]
    assert host["Init"] is True
    assert host["IpcMode"] == "private"
    assert host["LogConfig"]["Type"] == "none"
    assert set(host["Tmpfs"]) == {"/workspace", "/tmp", "/home/sandbox"}
    assert "size=256m" in host["Tmpfs"]["/workspace"]
    assert attrs["Config"]["User"] == "0:0"
    labels = attrs["Config"]["Labels"]
    assert labels["airlock.session"] == session
    assert {"airlock.instance", "airlock.run", "airlock.deadline", "airlock.tenant"} <= set(labels)
    # The container's environment is the one runs start from, nothing of the server's.
    assert dict(e.split("=", 1) for e in attrs["Config"]["Env"]) == sandbox_environment()


async def test_records_survive_restart_and_audit_shows_them(
    make_server: MakeServer, data_dir: Path
) -> None:
    forged = "--- code (python), sha256 " + "0" * 64 + " ---"
    async with Client(make_server()) as client:
        data = await run(client, f"print('audited output')\nprint({forged!r})")
    # A new server on the same data directory still has every record.
    async with Client(make_server()) as client:
        fetched = await client.call_tool(
            "fetch_artifact", {"run_id": data["run_id"], "path": ".airlock/stdout"}
        )
    assert "audited output" in text_of(fetched)
    airlock = Path(sys.executable).with_name("airlock")
    listing = (
        await anyio.run_process([str(airlock), "audit", "runs", "--data-dir", str(data_dir)])
    ).stdout.decode()
    assert data["run_id"] in listing
    assert " ok " in listing
    detail = (
        await anyio.run_process(
            [str(airlock), "audit", "run", data["run_id"], "--data-dir", str(data_dir)]
        )
    ).stdout.decode()
    assert "audited output" in detail
    # What the run printed is quoted: it cannot pass for the report's own code header.
    assert f"\n| {forged}\n" in detail and f"\n{forged}\n" not in detail
    assert "peak memory" in detail
    assert f"runtime    {data['runtime']}\n" in detail


async def test_a_tenant_over_its_concurrent_run_limit_is_refused(
    make_server: MakeServer, docker_client: docker.DockerClient
) -> None:
    async with Client(make_server({"tenants": {"max_concurrent_runs": 1}, **NO_POOL})) as client:
        first = await run(client, "print(1)")
        session = first["session_id"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, client, "import time; time.sleep(30)")
            # The long run's own container (the first call's is removed after its reply).
            await wait_until(
                lambda: [
                    c
                    for c in docker_client.containers.list(
                        filters={"label": f"airlock.session={session}"}, ignore_removed=True
                    )
                    if c.labels.get("airlock.run") != first["run_id"]
                ]
            )
            refused = await client.call_tool("run_code", {"code": "print(2)"})
            tg.cancel_scope.cancel()
    assert refused.is_error
    assert "already running" in text_of(refused)


async def test_a_lease_past_its_lifetime_ends_without_any_call(
    make_server: MakeServer, docker_client: docker.DockerClient
) -> None:
    # The server's clock is the test's: the lease outlives its lifetime only once its call's
    # container is running, however slow the engine is, and nothing waits for real seconds.
    now = [time.time()]
    policy = {"sessions": {"idle_ttl_s": 2, "max_lifetime_s": 2}, **NO_POOL}
    async with Client(make_server(policy, clock=lambda: now[0])) as client:
        session = (await run(client, "print(1)"))["session_id"]
        label = f"airlock.session={session}"
        results: list[CallToolResult] = []

        async def long_call() -> None:
            code = "import time; time.sleep(60)"
            results.append(
                await client.call_tool("run_code", {"code": code, "session_id": session})
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call)
            await wait_for_containers(docker_client, label, running(1), within=60)
            now[0] += 3
        [result] = results
        assert result.is_error
        assert "ended while the call was running" in text_of(result)
        assert session in text_of(result)
        await wait_for_containers(docker_client, label, none_left, within=15)
