"""The server while its image is being built: callers are told, never kept waiting."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent
from support import make_wheel

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

MakeServer = Callable[..., MCPServer]


async def call_text(client: Client) -> tuple[bool, str]:
    result = await client.call_tool("run_code", {"code": "print(1)"})
    block = result.content[0]
    assert isinstance(block, TextContent)
    return result.is_error, block.text


async def test_a_call_during_the_build_is_told_to_retry_and_then_hears_the_failure(
    make_server: MakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lock whose image does not exist yet and cannot be built: its one wheel (from a
    # local directory, no index) does not match the pinned hash.
    index = tmp_path / "index"
    index.mkdir()
    wheel = make_wheel(index)
    wrong = hashlib.sha256(wheel.read_bytes() + b"x").hexdigest()
    lock = tmp_path / "python.lock"
    lock.write_text(f"airlock-probe==1.0 --hash=sha256:{wrong}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    async with Client(make_server({"image": {"python_lock": str(lock)}})) as client:
        with anyio.fail_after(10):
            is_error, text = await call_text(client)
        assert is_error
        assert "the sandbox image is being built" in text
        assert "retry" in text
        assert "s left" in text or "so far" in text
        # Once the background build has failed, the next call hears why, naming the package.
        with anyio.fail_after(120):
            while "being built" in text:
                await anyio.sleep(0.2)
                is_error, text = await call_text(client)
        assert is_error
        assert "airlock-probe==1.0" in text and "hash" in text


async def test_a_browse_while_the_browser_image_builds_is_told_to_retry_then_hears_the_failure(
    make_server: MakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The build is faked (the real one is test_browse's fixture): what is checked is that a
    # call never waits for it, and that its failure reaches the next caller.
    import threading

    from airlock.errors import ImageUnavailable
    from airlock.server import engine

    release = threading.Event()

    def failing_build(*args: object, **kwargs: object) -> str:
        release.wait(30)
        raise ImageUnavailable("debootstrap of the browser base failed (the test's fake)")

    absent = "airlock-browser:absent-for-a-test"
    monkeypatch.setattr(engine, "browser_image_tag", lambda: absent, raising=False)
    monkeypatch.setattr(engine, "ensure_browser_image", failing_build)

    async def browse_text(client: Client) -> tuple[bool, str]:
        result = await client.call_tool("browse", {"url": "https://example.com/"})
        block = result.content[0]
        assert isinstance(block, TextContent)
        return result.is_error, block.text

    async with Client(make_server()) as client:
        with anyio.fail_after(10):
            is_error, text = await browse_text(client)
            again = await browse_text(client)
        assert is_error and "the browser image is being built" in text and "retry" in text
        assert again[0] and "being built" in again[1]
        release.set()
        with anyio.fail_after(30):
            while "being built" in text:
                await anyio.sleep(0.1)
                is_error, text = await browse_text(client)
        assert is_error and "the test's fake" in text
