"""Shared fixtures: the real Docker engine, the real sandbox image, servers under test.

Tests marked `docker` need the engine. Locally they skip when it is missing; with
AIRLOCK_REQUIRE_DOCKER=1 (set by .ci/run) a missing engine fails them instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from mcp.server.mcpserver import MCPServer

from airlock.errors import AirlockError
from policies import Policy
from sandbox import connect
from sandbox.image import ensure_image
from server import Config, build_server

REQUIRE_DOCKER = os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    try:
        client = connect()
    except AirlockError as exc:
        if REQUIRE_DOCKER:
            pytest.fail(f"Docker is required (AIRLOCK_REQUIRE_DOCKER=1) but unavailable: {exc}")
        pytest.skip(f"no Docker engine: {exc}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def sandbox_image(docker_client: docker.DockerClient) -> str:
    """The real sandbox image, built once per test session if missing."""
    return ensure_image(docker_client, lambda line: sys.stderr.write(f"image: {line}\n"))


@pytest.fixture(autouse=True)
def _docker_marker(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("sandbox_image")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def make_server(data_dir: Path, sandbox_image: str) -> Callable[..., MCPServer]:
    """Build a server on this test's data dir: `make_server()` for the default policy,
    `make_server({"limits": {"memory_mb": 128}})` for a policy with those sections."""

    def make(policy: dict[str, Any] | None = None) -> MCPServer:
        return build_server(Config(data_dir=data_dir), Policy.model_validate(policy or {}))

    return make
