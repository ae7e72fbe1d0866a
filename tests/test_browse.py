"""browse end to end: real Chromium in the real browser image, under runc and runsc, against a
real local HTTPS server (a `trustme` certificate) that a capability lets the page reach
through the run's egress proxy. Driven through the SDK's in-memory client.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, ImageContent
from support import text_of
from upstream import Upstream

from airlock.tools.images import sniff_image

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

CALL_TIMEOUT_S = 120
CAP = "site"
LOOPBACK = ["127.0.0.0/8", "::1/128"]
# A 1x1 red PNG, for a page with an image.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)


def browse_policy(port: int, ca_file: Path) -> dict[str, Any]:
    site = {
        "description": "the test site",
        "hosts": ["localhost"],
        "ports": [port],
        "methods": ["GET", "HEAD"],
        "paths": ["/**"],
        "approval": "auto",
        "allow_private": LOOPBACK,
    }
    return {
        "capabilities": {CAP: site},
        "egress": {"upstream_ca_file": str(ca_file)},
        "browser": {"timeout_s": 30, "memory_mb": 1024},
    }


@pytest.fixture
def site_server(
    make_server: Callable[..., MCPServer], upstream: Upstream, upstream_ca_file: Path
) -> MCPServer:
    return make_server(browse_policy(upstream.port, upstream_ca_file))


def serve(upstream: Upstream, path: str, html: str, kind: str = "text/html; charset=utf-8") -> str:
    upstream.pages[path] = (kind, html.encode(), ())
    return f"https://localhost:{upstream.port}{path}"


async def call(c: Client, tool: str, args: dict[str, Any]) -> CallToolResult:
    with anyio.fail_after(CALL_TIMEOUT_S):
        return await c.call_tool(tool, args)


async def grant(c: Client) -> str:
    result = await call(c, "request_capability", {"capability": CAP, "reason": "test"})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return str(result.structured_content["capability_id"])


async def test_a_page_comes_back_as_a_png_and_its_text_in_the_envelope(
    site_server: MCPServer, upstream: Upstream
) -> None:
    upstream.pages["/pixel.png"] = ("image/png", PIXEL, ())
    url = serve(
        upstream,
        "/hello",
        "<title>Hello page</title><h1>Greetings from the box</h1>"
        '<img src="/pixel.png" width="50" height="50"><a href="/next">next page</a>',
    )
    async with Client(site_server) as c:
        cap = await grant(c)
        result = await call(c, "browse", {"url": url, "capabilities": [cap]})
    assert not result.is_error, text_of(result)
    data = result.structured_content
    assert data is not None
    assert data["status"] == "ok", (data["error"], data["egress"], text_of(result))
    assert data["title"] == "Hello page"
    assert "Greetings from the box" in data["text"]
    assert data["links"][0]["href"] == f"https://localhost:{upstream.port}/next"
    images = [b for b in result.content if isinstance(b, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    picture = sniff_image(base64.b64decode(images[0].data))
    assert picture is not None and (picture.width, picture.height) == (1280, 800)
    text = text_of(result)
    body = text.split('stream="page"', 1)[1].split("</untrusted-output", 1)[0]
    assert "Greetings from the box" in body
    assert "/pixel.png" in upstream.paths()
    allowed = [e for e in data["egress"] if e["decision"] == "allow"]
    assert {e["path"] for e in allowed} >= {"/hello", "/pixel.png"}
