"""Helpers shared by the tests (imported as `support`; pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import zipfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import docker
import httpx
import pytest
from anyio.abc import Process
from docker.models.containers import Container
from mcp.types import CallToolResult, TextContent

T = TypeVar("T")

# Tests that watch a session's containers by their `airlock.session` label run without
# the warm pool: pooled containers are created before any session and carry no session
# label. tests/test_backend_contract.py covers pooled containers' teardown.
NO_POOL: dict[str, Any] = {"pool": {"size": 0}}
NO_POOL_TOML = "[pool]\nsize = 0\n"

AIRLOCK = str(Path(sys.executable).with_name("airlock"))


async def wait_until(check: Callable[[], T], *, within: float = 30, interval: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; fail after `within` seconds.

    For conditions with no event to wait on, such as a container appearing in the engine.
    """
    with anyio.fail_after(within):
        while True:
            value = check()
            if value:
                return value
            await anyio.sleep(interval)


def make_wheel(
    directory: Path, name: str = "airlock_probe", version: str = "1.0", requires: str = ""
) -> Path:
    """A minimal valid pure-Python wheel (depending on `requires`, if named)."""
    dist_info = f"{name}-{version}.dist-info"
    depends = f"Requires-Dist: {requires}\n" if requires else ""
    files = {
        f"{name}/__init__.py": b"VALUE = 1\n",
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{depends}".encode()
        ),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in [*files, f"{dist_info}/RECORD"])
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
        wheel.writestr(f"{dist_info}/RECORD", record)
    return path


def text_of(result: CallToolResult) -> str:
    """The text of a tool result: its text blocks joined (pictures are not text)."""
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Serving:
    """A running `airlock serve --http`: its base URL and its process."""

    base: str
    process: Process


@asynccontextmanager
async def serving_http(*args: str, log: Path | None = None) -> AsyncIterator[Serving]:
    """`airlock serve --http` on a free loopback port with `args` added, once its
    /healthz answers; stops the server with SIGTERM unless the test already did.
    With `log`, the server's stderr goes to that file."""
    port = free_port()
    command = [AIRLOCK, "serve", "--http", "--port", str(port), *args]
    with contextlib.ExitStack() as files:
        stderr = files.enter_context(log.open("wb")) if log is not None else None
        process = await anyio.open_process(command, stdin=None, stdout=None, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as probe:
            with anyio.fail_after(60):
                while True:
                    assert process.returncode is None, "server exited during startup"
                    try:
                        if (await probe.get(f"{base}/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await anyio.sleep(0.1)
        yield Serving(base, process)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                await process.wait()
        await process.aclose()


# ---- watching the containers of a server ---------------------------------------------


async def containers(client: docker.DockerClient, label: str) -> list[Container]:
    """The containers carrying `label` ("key=value"), stopped ones included."""
    return await anyio.to_thread.run_sync(
        lambda: client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
    )


async def poll_containers(
    client: docker.DockerClient,
    label: str,
    done: Callable[[list[Container]], bool],
    *,
    within: float,
) -> list[Container]:
    """Poll the engine until the containers carrying `label` satisfy `done`, at most
    `within` seconds; returns the last listing either way."""
    found: list[Container] = []
    with anyio.move_on_after(within):
        while True:
            found = await containers(client, label)
            if done(found):
                break
            await anyio.sleep(0.1)
    return found


async def wait_for_containers(
    client: docker.DockerClient,
    label: str,
    done: Callable[[list[Container]], bool],
    *,
    within: float,
    log: Callable[[], str] | None = None,
) -> list[Container]:
    """Like `poll_containers`, failing the test (with the states seen and, given `log`,
    the server's log) when `done` never holds."""
    found = await poll_containers(client, label, done, within=within)
    if not done(found):
        states = [(c.short_id, c.status) for c in found]
        server_log = f"\nserver log:\n{log()}" if log is not None else ""
        pytest.fail(f"containers {label}: still {states} after {within}s{server_log}")
    return found


def running(count: int) -> Callable[[list[Container]], bool]:
    return lambda found: len(found) == count and all(c.status == "running" for c in found)


def none_left(found: list[Container]) -> bool:
    return not found
