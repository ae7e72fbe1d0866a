"""The Docker engine as this room reaches it: connecting, and its errors in Airlock's words.

Belongs here: making the one client every engine call goes through (`connect`, whose
connections share one pool, `sdk_connections.py`), the questions asked of the engine
itself (its version, its runtimes), and `engine_errors`, which turns the SDK's and the
transport's exceptions into `EngineUnavailable`, `ImageUnavailable` or `SandboxError`
naming the fix. Does not belong here: anything about one container (`containers.py`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeAlias

import docker
import docker.errors
import requests
from docker.constants import MINIMUM_DOCKER_API_VERSION

from airlock.errors import EngineUnavailable, ImageUnavailable, SandboxError

from .sdk_connections import MAX_CONNECTIONS, share_one_pool

# The engine client as the rooms above hold it: a handle they get from `connect`, pass back
# into this room and close. Only this room imports docker (pyproject's import contracts).
EngineClient: TypeAlias = docker.DockerClient


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate Docker SDK and transport errors into Airlock's, naming the fix."""
    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageUnavailable(
            f"{action}: the sandbox image is missing; run `airlock image build`, or for an "
            "image named by [sandbox] image in the policy, `docker pull` it (`airlock doctor` "
            "says which)"
        ) from exc
    except (docker.errors.APIError, docker.errors.DockerException) as exc:
        if isinstance(exc, docker.errors.APIError) and not _is_connection_error(exc):
            raise SandboxError(f"{action}: the Docker engine refused: {exc.explanation}") from exc
        raise EngineUnavailable(
            f"{action}: cannot reach the Docker engine ({exc}); start it "
            "(`sudo systemctl start docker`, or `dockerd &`) and check `airlock doctor`"
        ) from exc
    except requests.exceptions.RequestException as exc:
        raise EngineUnavailable(
            f"{action}: cannot reach the Docker engine ({exc}); start it and check `airlock doctor`"
        ) from exc


def _is_connection_error(exc: docker.errors.APIError) -> bool:
    """Whether the engine never answered (no response), rather than refused."""
    return exc.response is None


def connect() -> EngineClient:
    """A client for the engine named by the environment (DOCKER_HOST or the default socket),
    speaking the engine's API version."""
    client: docker.DockerClient | None = None
    try:
        with engine_errors("connecting"):
            client = _client(_api_version())
            client.ping()
    except EngineUnavailable as exc:
        if client is not None:
            client.close()
        host = os.environ.get("DOCKER_HOST")
        if not host:
            raise
        raise EngineUnavailable(
            f"cannot reach the Docker engine at DOCKER_HOST={host} ({exc.__cause__}); start "
            "the engine it names, or correct DOCKER_HOST (or unset it for the local socket)"
        ) from exc.__cause__
    assert client is not None
    return client


def _client(version: str) -> EngineClient:
    client = docker.from_env(version=version, timeout=120, max_pool_size=MAX_CONNECTIONS)
    share_one_pool(client)
    return client


def _api_version() -> str:
    """The engine's API version, asked by a client of the oldest version the SDK speaks.

    Not the SDK's own detection (`version="auto"`): that asks before any pool of ours is
    in place, and leaves a socket open each time the engine cannot be reached."""
    probe = _client(MINIMUM_DOCKER_API_VERSION)
    try:
        version = probe.version(api_version=False).get("ApiVersion")
    finally:
        probe.close()
    if not isinstance(version, str):
        raise docker.errors.DockerException("the engine did not say its API version")
    return version


def engine_version(client: EngineClient) -> str:
    """The engine's version, as `docker version` reports it."""
    return str(client.version().get("Version", "?"))


def registered_runtimes(client: EngineClient) -> frozenset[str]:
    """The OCI runtimes the engine has registered (`docker info`), by name."""
    with engine_errors("asking the engine for its runtimes"):
        info: dict[str, Any] = client.info()
    return frozenset(info.get("Runtimes") or {})
