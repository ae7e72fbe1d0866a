"""browse from the warm browser pool end to end: real Chromium in the real browser image,
under runc and runsc, a real local HTTPS site (`trustme`) reached through the run's proxy.
The box that waited serves the call (its CA bound to the run's proxy) and is replaced.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from support import text_of, wait_until
from test_browse import browse_policy, call, grant, serve
from upstream import Upstream

from airlock.sandbox.browser_image import BROWSER_LABEL
from airlock.sandbox.docker.labels import LABEL_SESSION
from airlock.sandbox.instance import LABEL_PID

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.usefixtures("browser_image")]

READY_WITHIN_S = 90


def waiting_boxes(client: docker.DockerClient) -> list[str]:
    """This process's browser boxes that wait in a pool (running, no session yet)."""
    found = client.api.containers(
        filters={"label": [f"{LABEL_PID}={os.getpid()}", f"{BROWSER_LABEL}=1"]}
    )
    return sorted(c["Id"] for c in found if c["Labels"].get(LABEL_SESSION) == "")


async def test_a_browse_takes_the_waiting_box_reaches_the_https_site_and_the_pool_refills(
    make_server: Callable[..., MCPServer],
    upstream: Upstream,
    upstream_ca_file: Path,
    docker_client: docker.DockerClient,
) -> None:
    policy = browse_policy(upstream.port, upstream_ca_file)
    policy["browser"]["pool"] = 1
    server = make_server(policy)
    url = serve(upstream, "/small", "<title>small page</title><p>served warm</p>")
    async with Client(server) as c:
        [waiting] = await wait_until(lambda: waiting_boxes(docker_client), within=READY_WITHIN_S)
        cap = await grant(c)
        result = await call(c, "browse", {"url": url, "capabilities": [cap]})
        data = result.structured_content
        assert data is not None and not result.is_error, text_of(result)
        assert data["status"] == "ok", (data["error"], data["egress"])
        assert data["title"] == "small page" and "served warm" in data["text"]
        allowed = [e for e in data["egress"] if e["decision"] == "allow"]
        assert "/small" in [e["path"] for e in allowed], data["egress"]
        assert "/small" in upstream.paths()
        # The waiting box served the call and went; another waits in its place.
        refilled = await wait_until(
            lambda: [b for b in waiting_boxes(docker_client) if b != waiting],
            within=READY_WITHIN_S,
        )
        assert waiting not in refilled
        # Removed after the reply, in the background.
        await wait_until(
            lambda: not docker_client.api.containers(all=True, filters={"id": waiting}), within=30
        )
    # The server's end takes the pool with it.
    await wait_until(lambda: not waiting_boxes(docker_client), within=30)


async def test_a_browse_at_the_servers_start_leaves_one_pool_and_the_next_browse_takes_from_it(
    make_server: Callable[..., MCPServer],
    upstream: Upstream,
    upstream_ca_file: Path,
    docker_client: docker.DockerClient,
) -> None:
    """A browse arriving while the server's warm-up still connects to the engine used to
    make a second backend: its pool was the one calls took from, and nobody refilled it."""
    policy = browse_policy(upstream.port, upstream_ca_file)
    policy["browser"]["pool"] = 1
    server = make_server(policy)
    url = serve(upstream, "/early", "<title>early</title><p>at the start</p>")
    async with Client(server) as c:
        cap = await grant(c)
        # At once: nothing waits yet, so this box is made for the call.
        first = await call(c, "browse", {"url": url, "capabilities": [cap]})
        data = first.structured_content
        assert data is not None and not first.is_error, text_of(first)
        assert data["status"] == "ok", (data["error"], data["egress"])
        [waiting] = await wait_until(lambda: waiting_boxes(docker_client), within=READY_WITHIN_S)
        second = await call(c, "browse", {"url": url, "capabilities": [cap]})
        assert not second.is_error, text_of(second)
        # The waiting box served it: removed after the reply, not left waiting.
        await wait_until(
            lambda: not docker_client.api.containers(all=True, filters={"id": waiting}), within=30
        )
