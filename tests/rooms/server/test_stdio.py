"""`airlock serve` as a real subprocess over stdio: tools end to end, and how it stops.

Stdin EOF, SIGTERM and SIGINT must end the process with exit code 0 and no
container left behind; after a SIGKILL the container outlives its server until
the next server reaps it. Most tests spawn the server themselves and hand its
pipes to the SDK client through a small transport, so they hold the process
(its pid, its exit code, its stderr) and decide alone when stdin closes: the
SDK's own stdio transport closes stdin and escalates to SIGTERM after two
seconds, which would blur the EOF path with the signal path.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import docker
import docker.errors
import mcp_types
import pytest
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from docker.models.containers import Container
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from support import (
    AIRLOCK,
    NO_POOL_TOML,
    containers,
    none_left,
    poll_containers,
    running,
    text_of,
    wait_for_containers,
)

from airlock.store import Database
from airlock.store.fleet.claims import ENDED_BY_DEATH

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

# Prints once it runs, then outlives every wait in these tests.
LONG_RUN = "import time; print('x', flush=True); time.sleep(120)"
APPEAR_S = 60  # until a started run's container runs
VANISH_S = 20  # until a removed container is gone
EXIT_S = 20  # until a stopping server has exited
MAX_LINE = 64 * 1024 * 1024


@dataclass
class Served:
    process: Process
    log_path: Path

    def log(self) -> str:
        """The server's stderr so far, for assertion messages."""
        return self.log_path.read_text(errors="replace")


@pytest.fixture
def started_pids(docker_client: docker.DockerClient) -> Iterator[list[int]]:
    """Pids of the servers a test starts; their containers are removed afterwards, so a
    failing test leaks nothing (a passing one has nothing left to remove)."""
    pids: list[int] = []
    yield pids
    host = socket.gethostname()
    for pid in pids:
        labels = [f"airlock.pid={pid}", f"airlock.host={host}"]
        for container in docker_client.containers.list(
            all=True, filters={"label": labels}, ignore_removed=True
        ):
            with suppress(docker.errors.NotFound):
                container.remove(force=True)


def server_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    if "DOCKER_HOST" in os.environ:  # the engine the tests use, wherever it is
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    return env


def serve_args(data_dir: Path, policy_toml: str = NO_POOL_TOML) -> list[str]:
    # These tests watch a session's containers by label, so no warm pool (support.NO_POOL).
    policy = data_dir.parent / "policy.toml"
    policy.write_text(policy_toml)
    return ["serve", "--data-dir", str(data_dir), "--policy", str(policy)]


@asynccontextmanager
async def airlock_serve(
    tmp_path: Path,
    data_dir: Path,
    pids: list[int],
    name: str = "server",
    policy_toml: str = NO_POOL_TOML,
) -> AsyncIterator[Served]:
    """`airlock serve` as a child process; on the way out stdin closes and the process
    gets EXIT_S to end before it is killed."""
    log_path = tmp_path / f"{name}.stderr"
    with log_path.open("wb") as log:
        process = await anyio.open_process(
            [AIRLOCK, *serve_args(data_dir, policy_toml)],
            env=server_env(tmp_path),
            stderr=log,
        )
    pids.append(process.pid)
    served = Served(process, log_path)
    try:
        yield served
    finally:
        with anyio.CancelScope(shield=True):
            # EOF first, and the server's stdout stays open until it has exited.
            if process.stdin is not None:
                with suppress(anyio.BrokenResourceError, OSError):
                    await process.stdin.aclose()
            with anyio.move_on_after(EXIT_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.aclose()
        # Shown by pytest when the test fails, whatever failed.
        sys.stderr.write(f"--- stderr of {name} ---\n{served.log()}")


@asynccontextmanager
async def pipe_transport(
    process: Process,
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """The SDK client's view of a process we started: newline-delimited JSON-RPC over its
    stdin and stdout. Leaving closes stdin, which is the server's EOF."""
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, BufferedByteReceiveStream(process.stdout)
    to_client, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_client = anyio.create_memory_object_stream[SessionMessage](0)

    async def server_to_client() -> None:
        async with to_client:
            while True:
                try:
                    line = await stdout.receive_until(b"\n", MAX_LINE)
                except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                    return
                message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                try:
                    await to_client.send(SessionMessage(message))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the client is gone

    async def client_to_server() -> None:
        async with from_client:
            async for item in from_client:
                data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    await stdin.send(data.encode() + b"\n")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    return

    async with anyio.create_task_group() as tg:
        tg.start_soon(server_to_client)
        tg.start_soon(client_to_server)
        try:
            yield read_stream, write_stream
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                with suppress(anyio.BrokenResourceError, OSError):  # the server may be gone
                    await stdin.aclose()
                await read_stream.aclose()
                await write_stream.aclose()


async def wait_for_exit(served: Served) -> int:
    try:
        with anyio.fail_after(EXIT_S):
            return await served.process.wait()
    except TimeoutError:
        pytest.fail(f"the server did not exit within {EXIT_S}s\nserver log:\n{served.log()}")


async def start_session(
    client: Client, log: Callable[[], str], docker_client: docker.DockerClient
) -> str:
    """A quick call's session id, once that call's own container (removed right after the
    reply) is gone, so later waits on the session's containers see only later calls."""
    result = await client.call_tool("run_code", {"code": "print('ready')"})
    assert result.structured_content is not None, f"{text_of(result)}\n{log()}"
    assert result.structured_content["status"] == "ok", text_of(result)
    session_id: str = result.structured_content["session_id"]
    run_label = f"airlock.run={result.structured_content['run_id']}"
    await wait_for_containers(docker_client, run_label, none_left, within=VANISH_S, log=log)
    return session_id


async def long_call(client: Client, session_id: str, outcome: list[object]) -> None:
    """A run that outlives the test's waits; ends with a result or a closed connection."""
    try:
        args = {"code": LONG_RUN, "session_id": session_id, "timeout_s": 300}
        outcome.append(await client.call_tool("run_code", args))
    except MCPError as exc:
        outcome.append(exc)


async def running_long_call(
    client: Client,
    session_id: str,
    tg: TaskGroup,
    outcome: list[object],
    docker_client: docker.DockerClient,
    log: Callable[[], str],
) -> Container:
    """The container of a long call started in `tg`, once it runs."""
    tg.start_soon(long_call, client, session_id, outcome)
    [box] = await wait_for_containers(
        docker_client, f"airlock.session={session_id}", running(1), within=APPEAR_S, log=log
    )
    return box


async def test_sdk_stdio_client_runs_code_and_its_exit_stops_the_server_without_leftovers(
    tmp_path: Path, docker_client: docker.DockerClient, started_pids: list[int]
) -> None:
    log_path = tmp_path / "server.stderr"
    params = StdioServerParameters(
        command=AIRLOCK, args=serve_args(tmp_path / "data"), env=server_env(tmp_path)
    )
    outcome: list[object] = []

    def log() -> str:
        return log_path.read_text(errors="replace")

    try:
        with log_path.open("w") as errlog:
            async with (
                anyio.create_task_group() as tg,
                Client(stdio_client(params, errlog=errlog)) as client,
            ):
                ran = await client.call_tool(
                    "run_code", {"code": "print(1); open('out.txt', 'w').write('artifact')"}
                )
                assert ran.structured_content is not None, f"{text_of(ran)}\n{log()}"
                assert ran.structured_content["status"] == "ok", text_of(ran)
                assert ran.structured_content["stdout"]["text"] == "1\n"
                fetched = await client.call_tool(
                    "fetch_artifact",
                    {"run_id": ran.structured_content["run_id"], "path": "out.txt"},
                )
                assert not fetched.is_error, text_of(fetched)
                assert fetched.structured_content is not None
                assert fetched.structured_content["size"] == len("artifact")
                assert "artifact" in text_of(fetched)

                session_id = ran.structured_content["session_id"]
                box = await running_long_call(client, session_id, tg, outcome, docker_client, log)
                pid = int(box.labels["airlock.pid"])
                started_pids.append(pid)
                instance = box.labels["airlock.instance"]

            # The SDK waited for the process (stdin EOF, then SIGTERM after 2 s if need be).
            assert not await anyio.Path(f"/proc/{pid}").exists(), log()
            assert len(outcome) == 1
            await wait_for_containers(
                docker_client, f"airlock.instance={instance}", none_left, within=VANISH_S, log=log
            )
    finally:
        sys.stderr.write(f"--- stderr of the server ---\n{log()}")


async def test_stdin_eof_ends_the_server_with_exit_0_and_removes_its_containers(
    tmp_path: Path, docker_client: docker.DockerClient, started_pids: list[int]
) -> None:
    outcome: list[object] = []
    async with airlock_serve(tmp_path, tmp_path / "data", started_pids) as served:
        async with anyio.create_task_group() as tg:
            async with Client(pipe_transport(served.process)) as client:
                session_id = await start_session(client, served.log, docker_client)
                box = await running_long_call(
                    client, session_id, tg, outcome, docker_client, served.log
                )
                assert box.labels["airlock.pid"] == str(served.process.pid)
            # Leaving the client closed the server's stdin, and nothing else.
            assert await wait_for_exit(served) == 0, served.log()

        assert len(outcome) == 1
        assert "received" not in served.log()  # no signal was involved
        await wait_for_containers(
            docker_client,
            f"airlock.instance={box.labels['airlock.instance']}",
            none_left,
            within=VANISH_S,
            log=served.log,
        )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_ends_the_server_with_exit_0_and_removes_its_containers(
    tmp_path: Path,
    docker_client: docker.DockerClient,
    started_pids: list[int],
    signum: signal.Signals,
) -> None:
    outcome: list[object] = []
    async with (
        airlock_serve(tmp_path, tmp_path / "data", started_pids) as served,
        anyio.create_task_group() as tg,
        Client(pipe_transport(served.process)) as client,
    ):
        session_id = await start_session(client, served.log, docker_client)
        box = await running_long_call(client, session_id, tg, outcome, docker_client, served.log)
        served.process.send_signal(signum)
        # The client keeps stdin open: the signal alone must stop the server.
        left = await poll_containers(
            docker_client,
            f"airlock.instance={box.labels['airlock.instance']}",
            none_left,
            within=VANISH_S,
        )
        with anyio.move_on_after(EXIT_S):
            await served.process.wait()
        exit_code = served.process.returncode
        log_then = served.log()  # before stdin closes

    # Asserted out here, once leaving the client has closed stdin, so that a server
    # ignoring the signal fails the test instead of hanging its clean-up.
    assert left == [], f"{[(c.short_id, c.status) for c in left]}\n{log_then}"
    assert exit_code == 0, (
        f"exit code {exit_code} {EXIT_S}s after {signum.name} (None: still running)\n"
        f"server log then:\n{log_then}"
    )
    assert len(outcome) == 1
    assert f"received {signum.name}" in served.log()


async def test_cancelled_call_over_stdio_has_its_container_removed(
    tmp_path: Path, docker_client: docker.DockerClient, started_pids: list[int]
) -> None:
    async with (
        airlock_serve(tmp_path, tmp_path / "data", started_pids) as served,
        Client(pipe_transport(served.process)) as client,
    ):
        session_id = await start_session(client, served.log, docker_client)
        label = f"airlock.session={session_id}"
        async with anyio.create_task_group() as tg:
            tg.start_soon(long_call, client, session_id, [])
            await wait_for_containers(
                docker_client, label, running(1), within=APPEAR_S, log=served.log
            )
            tg.cancel_scope.cancel()  # the SDK sends notifications/cancelled

        await wait_for_containers(docker_client, label, none_left, within=VANISH_S, log=served.log)
        after = await client.call_tool("run_code", {"code": "print('still serving')"})
        assert after.structured_content is not None, text_of(after)
        assert after.structured_content["status"] == "ok", text_of(after)


async def test_sigkilled_server_leaves_its_container_for_the_next_server_to_reap(
    tmp_path: Path, docker_client: docker.DockerClient, started_pids: list[int]
) -> None:
    data_dir = tmp_path / "data"
    outcome: list[object] = []
    async with (
        airlock_serve(tmp_path, data_dir, started_pids, "first") as first,
        anyio.create_task_group() as tg,
        Client(pipe_transport(first.process)) as client,
    ):
        session_id = await start_session(client, first.log, docker_client)
        box = await running_long_call(client, session_id, tg, outcome, docker_client, first.log)
        label = f"airlock.session={session_id}"
        assert box.labels["airlock.pid"] == str(first.process.pid)
        first.process.kill()
        # Reaping the child matters: a zombie still has its /proc entry.
        assert await wait_for_exit(first) == -signal.SIGKILL

    # Nothing ran to clean up: the container outlives its server.
    assert [c.id for c in await containers(docker_client, label)] == [box.id]

    async with airlock_serve(tmp_path, data_dir, started_pids, "second") as second:
        # The second server reaps at startup, before any call.
        await wait_for_containers(docker_client, label, none_left, within=APPEAR_S, log=second.log)
    assert await second.process.wait() == 0, second.log()


async def test_a_sigkilled_servers_run_is_ended_at_the_next_start_and_a_live_servers_is_not(
    tmp_path: Path, docker_client: docker.DockerClient, started_pids: list[int]
) -> None:
    data_dir = tmp_path / "data"
    outcomes: list[object] = []

    async def long_run(served: Served, client: Client, tg: TaskGroup) -> str:
        session_id = await start_session(client, served.log, docker_client)
        box = await running_long_call(client, session_id, tg, outcomes, docker_client, served.log)
        return box.labels["airlock.run"]

    async with (
        airlock_serve(tmp_path, data_dir, started_pids, "live") as live,
        anyio.create_task_group() as live_calls,
        Client(pipe_transport(live.process)) as live_client,
    ):
        live_run = await long_run(live, live_client, live_calls)
        async with (
            airlock_serve(tmp_path, data_dir, started_pids, "killed") as killed,
            anyio.create_task_group() as killed_calls,
            Client(pipe_transport(killed.process)) as killed_client,
        ):
            killed_run = await long_run(killed, killed_client, killed_calls)
            killed.process.kill()
            assert await wait_for_exit(killed) == -signal.SIGKILL

        async with (
            airlock_serve(tmp_path, data_dir, started_pids, "next") as next_server,
            Client(pipe_transport(next_server.process)) as next_client,
        ):
            # A tool's answer means the server's start, which ends dead servers' runs, is over.
            listed = await next_client.call_tool("list_workspace", {})
            assert not listed.is_error, f"{text_of(listed)}\n{next_server.log()}"
            db = await Database.open(data_dir / "airlock.db")
            try:
                ended = await db.get_run(killed_run)
                untouched = await db.get_run(live_run)
            finally:
                await db.close()
        assert ended is not None and untouched is not None
        assert (ended.status, ended.error) == ("killed", ENDED_BY_DEATH)
        assert ended.instance_id != untouched.instance_id
        assert untouched.status == "running", untouched
        live_calls.cancel_scope.cancel()


# ---- memory per run ------------------------------------------------------------------

MIB = 1024 * 1024
BIG_FILES = 4
BIG_FILE_MIB = 50
# Caps raised so that 200 MiB of artifacts is allowed and kept; runc for speed.
BIG_POLICY = f"""
[pool]
size = 0
[sandbox]
runtime = "runc"
[limits]
memory_mb = 768
workspace_mb = 320
[files]
max_artifact_file_bytes = {64 * MIB}
max_artifact_total_bytes = {256 * MIB}
"""
WRITE_FILES = """
import hashlib, json
count, size = {count}, {size}
sums = {{}}
for i in range(count):
    data = bytes([65 + i]) * size
    open(f"big{{i}}.bin", "wb").write(data)
    sums[f"big{{i}}.bin"] = hashlib.sha256(data).hexdigest()
print(json.dumps(sums))
"""
# What the server may gain in peak memory for the whole run, whatever the files' total:
# a few frames and chunks in flight, plus allocator slack (today's cost is their total).
RSS_BOUND = 48 * MIB


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


async def run_writing(client: Client, count: int, size: int, log: Callable[[], str]) -> Any:
    args = {"code": WRITE_FILES.format(count=count, size=size), "timeout_s": 300}
    with anyio.fail_after(600):
        result = await client.call_tool("run_code", args)
    assert result.structured_content is not None, f"{text_of(result)}\n{log()}"
    assert result.structured_content["status"] == "ok", text_of(result)
    return result.structured_content


async def test_a_run_leaving_200_mib_of_artifacts_costs_the_server_constant_memory(
    tmp_path: Path, started_pids: list[int]
) -> None:
    data_dir = tmp_path / "data"
    async with airlock_serve(tmp_path, data_dir, started_pids, policy_toml=BIG_POLICY) as served:
        pid = served.process.pid
        async with Client(pipe_transport(served.process)) as client:
            # The same code paths once with small files, so what is measured next is the
            # run's own cost, not first-use allocations (imports, threads, caches).
            await run_writing(client, BIG_FILES, MIB, served.log)
            before = peak_rss(pid)
            result = await run_writing(client, BIG_FILES, BIG_FILE_MIB * MIB, served.log)
            grown = peak_rss(pid) - before
            sums = json.loads(result["stdout"]["text"])
            assert {a["path"]: (a["size"], a["sha256"]) for a in result["artifacts"]} == {
                name: (BIG_FILE_MIB * MIB, sha) for name, sha in sums.items()
            }
            # Each file is whole in the blob store, and fetchable.
            page = await client.call_tool(
                "fetch_artifact",
                {"run_id": result["run_id"], "path": "big3.bin", "offset": 50 * MIB - 4},
            )
            assert not page.is_error, text_of(page)
            assert page.structured_content is not None
            assert page.structured_content["returned_bytes"] == 4
    total = BIG_FILES * BIG_FILE_MIB * MIB
    assert grown < RSS_BOUND, (
        f"peak RSS grew by {grown / MIB:.1f} MiB for a run leaving {total / MIB:.0f} MiB "
        f"of artifacts (bound {RSS_BOUND / MIB:.0f} MiB)\n{served.log()}"
    )
    blobs = data_dir / "blobs"
    for sha in sums.values():
        assert (blobs / sha[:2] / sha[2:]).stat().st_size == BIG_FILE_MIB * MIB
    # Nothing of the run's staging is left behind.
    assert not list(blobs.glob(".*"))


async def _rpc(process: Process, message: dict[str, Any]) -> None:
    assert process.stdin is not None
    await process.stdin.send((json.dumps(message) + "\n").encode())


async def test_a_client_whose_stdout_reader_died_stops_the_server_in_one_line_with_exit_0(
    tmp_path: Path, started_pids: list[int]
) -> None:
    """The client's end of stdout closes (it died): the server's next answer finds no
    reader. That is a stop like stdin's EOF, logged in one line, its sessions ended; not a
    BrokenPipeError traceback. The server's stdout is a plain pipe here, so the test can
    close its reading end for real."""
    log_path = tmp_path / "server.stderr"
    read_end, write_end = os.pipe()
    with log_path.open("wb") as log:
        process = await anyio.open_process(
            [AIRLOCK, *serve_args(tmp_path / "data")],
            env=server_env(tmp_path),
            stdout=write_end,
            stderr=log,
        )
    os.close(write_end)
    started_pids.append(process.pid)
    served = Served(process, log_path)
    replies = os.fdopen(read_end, "rb")
    async with process:
        client_info = {"name": "dying", "version": "1"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}
        await _rpc(process, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        with anyio.fail_after(EXIT_S):
            assert b'"id":1' in await anyio.to_thread.run_sync(replies.readline), served.log()
        await _rpc(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "list_workspace", "arguments": {}}
        await _rpc(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        with anyio.fail_after(EXIT_S):
            reply = json.loads(await anyio.to_thread.run_sync(replies.readline))
        session_id = reply["result"]["structuredContent"]["session_id"]
        replies.close()
        stopping = "the client closed its end of stdout; stopping"
        with anyio.fail_after(EXIT_S):
            # Each request is an answer to write; each line also wakes the SDK's stdin
            # reader, a thread no cancellation interrupts.
            for n in range(3, 10_000):
                if stopping in served.log() or process.returncode is not None:
                    break
                with suppress(anyio.BrokenResourceError, OSError):
                    await _rpc(process, {"jsonrpc": "2.0", "id": n, "method": "ping"})
                await anyio.sleep(0.2)
        assert await wait_for_exit(served) == 0, served.log()
    text = served.log()
    assert stopping in text and "Traceback" not in text and "BrokenPipe" not in text, text
    db = await Database.open(tmp_path / "data" / "airlock.db")
    try:
        record = await db.get_session(session_id)
    finally:
        await db.close()
    assert record is not None and record.ended_at is not None, text
