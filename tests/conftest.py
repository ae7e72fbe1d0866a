"""Shared fixtures: the real Docker engine, the real sandbox image, servers under test.

Tests marked `docker` need the engine. Locally they skip when it is missing; with
AIRLOCK_REQUIRE_DOCKER=1 (set by .ci/run) a missing engine fails them instead, and so
does an engine without gVisor (`runsc`) registered. A test that uses the engine's
fixtures carries the marker however it came by them (`pytest_collection_modifyitems`), so
`pytest -m "not docker"` runs exactly the tests that need no engine, on a machine without
Docker. Those build their servers on the in-memory backend (tests/memory_backend.py):
`make_server` gives a test marked `docker` a server on Docker, and any other test one on
the in-memory backend, which contains nothing and runs only the code the test wrote.

The sandbox suites in `BOTH_RUNTIMES` run every test once under gVisor and once
under runc (the `sandbox_runtime` parameter). The rest test logic above the backend, so
they run under runc with no warm pool unless their policy says otherwise: a gVisor
container costs about three runc ones to start, and a pool of four per test server
dominated the suite's time (CI must stay under 30 minutes on two cores). What a new user
gets (runtime "auto", the default pool) is covered by the backend contract suite, the
pool tests, and the stdio and HTTP tests, which start real servers on the default policy.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import postgres
import pytest
import registry
import trustme
from mcp.server.mcpserver import MCPServer
from memory_backend import MemoryEngine, memory_engine_side
from support import REQUIRE_DOCKER, require_runtime
from upstream import Upstream, start_upstream

from airlock.errors import AirlockError
from airlock.policies import Policy
from airlock.sandbox import connect
from airlock.sandbox.browser_image import ensure_browser_image
from airlock.sandbox.docker import registered_runtimes
from airlock.sandbox.image import ensure_image
from airlock.sandbox.runtime import GVISOR, REGISTER_GVISOR, RUNC
from airlock.server import Config, build_server
from airlock.server.engine import Engine, EngineFactory
from airlock.store import Database

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
# Hardening, attacks, limits, egress, teardown, and the tools agents reach for (gVisor is
# the default runtime where it is registered); the backend contract names its own.
BOTH_RUNTIMES = (
    "test_attacks",
    "test_egress",
    "test_teardown",
    "test_toolbox",
    "test_browse",
    "test_browse_refs",
    "test_browse_kept",
    "test_browser_pool",
    "test_browse_pool",
)
ENGINE_FIXTURES = frozenset({"docker_client", "sandbox_image", "browser_image", "engine_runtimes"})
"""The fixtures that need the engine: a test using one needs the `docker` marker."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test that names its runtimes itself (a `runtime` parameter) is not doubled again.
    if (
        "sandbox_runtime" in metafunc.fixturenames
        and "runtime" not in metafunc.fixturenames
        and metafunc.module.__name__ in BOTH_RUNTIMES
        and metafunc.definition.get_closest_marker("docker") is not None
    ):
        metafunc.parametrize("sandbox_runtime", [GVISOR, RUNC])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `docker` every test that uses an engine fixture, however it came by it."""
    for item in items:
        used = ENGINE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if used and item.get_closest_marker("docker") is None:
            item.add_marker(pytest.mark.docker)


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
def postgres_cluster() -> Iterator[postgres.Cluster]:
    """The real PostgreSQL of this test session: `.ci/run`'s (by its URL) or one started here."""
    url = os.environ.get(postgres.URL_VARIABLE)
    if url:
        yield postgres.Cluster(url=url)
        return
    try:
        # Not under pytest's tmp_path: its parents are root's 0700, closed to the postgres user.
        cluster = postgres.start(Path(tempfile.mkdtemp(prefix="airlock-postgres-")))
    except postgres.PostgresMissing as exc:
        if REQUIRE_DOCKER:
            pytest.fail(f"PostgreSQL is required (AIRLOCK_REQUIRE_DOCKER=1): {exc}")
        pytest.skip(str(exc))
    yield cluster
    assert cluster.directory is not None
    postgres.stop(cluster.directory)
    shutil.rmtree(cluster.directory)


@pytest.fixture
def postgres_url(postgres_cluster: postgres.Cluster) -> str:
    """The URL of an empty database of this test's own on the real PostgreSQL."""
    return postgres.fresh_database(postgres_cluster)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a store test's records live, once on each database: a new SQLite file, or a
    fresh database on the real PostgreSQL (`Database.open` takes either)."""
    if request.param == "sqlite":
        return tmp_path / "airlock.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def db(store_at: Path | str) -> AsyncIterator[Database]:
    """A `Database` on the store `store_at` names, closed after the test."""
    database = await Database.open(store_at)
    yield database
    await database.close()


@pytest.fixture(scope="session")
def registry_address() -> Iterator[str]:
    """The real container registry of this test session (`127.0.0.1:PORT`): `.ci/run`'s, or
    one started here on a temporary directory."""
    address = os.environ.get(registry.ADDRESS_VARIABLE)
    if address:
        yield address
        return
    directory = Path(tempfile.mkdtemp(prefix="airlock-registry-"))
    try:
        started = registry.start(directory)
    except registry.RegistryMissing as exc:
        shutil.rmtree(directory)
        if REQUIRE_DOCKER:
            pytest.fail(f"the registry is required (AIRLOCK_REQUIRE_DOCKER=1): {exc}")
        pytest.skip(str(exc))
    yield started.address
    registry.stop(directory)
    shutil.rmtree(directory)


@pytest.fixture(scope="session")
def sandbox_image(docker_client: docker.DockerClient) -> str:
    """The real sandbox image, built once per test session if missing."""

    def progress(line: str) -> None:
        sys.stderr.write(f"image: {line}\n")

    return ensure_image(docker_client, progress)


@pytest.fixture(scope="session")
def browser_image(docker_client: docker.DockerClient) -> str:
    """The real browser image of `browse`, built once per test session if missing (a server
    would build it in the background and tell the first call to retry)."""

    def progress(line: str) -> None:
        sys.stderr.write(f"browser image: {line}\n")

    return ensure_browser_image(docker_client, progress)


@pytest.fixture(scope="session")
def engine_runtimes(docker_client: docker.DockerClient) -> frozenset[str]:
    return registered_runtimes(docker_client)


@pytest.fixture
def sandbox_runtime() -> str:
    """The policy's `[sandbox] runtime` for this test: runc unless parametrized (the
    in-memory backend runs every test the same way, whatever the runtime says)."""
    return RUNC


@pytest.fixture(autouse=True)
def _runtime_registered(request: pytest.FixtureRequest) -> None:
    """A test asking for gVisor fails in CI when the engine lacks it, and skips locally."""
    if "sandbox_runtime" not in request.fixturenames:
        return
    if request.node.get_closest_marker("docker") is None:
        return
    require_runtime(
        request.getfixturevalue("sandbox_runtime"), request.getfixturevalue("engine_runtimes")
    )


@pytest.fixture(autouse=True)
def _docker_marker(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("sandbox_image")
        if REQUIRE_DOCKER and GVISOR not in request.getfixturevalue("engine_runtimes"):
            pytest.fail(
                "CI runs sandboxes under gVisor too, but runsc is not registered with the "
                f"Docker engine; {REGISTER_GVISOR}"
            )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def memory_engine() -> MemoryEngine:
    """The in-memory engine this test's servers share (as servers share a Docker engine)."""
    return MemoryEngine()


@pytest.fixture
def engine_side(request: pytest.FixtureRequest) -> EngineFactory:
    """What this test's servers run their sandboxes on: Docker for a test marked `docker`,
    the in-memory backend for any other."""
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("sandbox_image")
        return Engine
    engine: MemoryEngine = request.getfixturevalue("memory_engine")
    return memory_engine_side(engine)


@pytest.fixture
def make_server(
    data_dir: Path, sandbox_runtime: str, engine_side: EngineFactory
) -> Callable[..., MCPServer]:
    """Build a server on this test's data dir: `make_server()` for the default policy,
    `make_server({"limits": {"memory_mb": 128}})` for a policy with those sections.
    The runtime is the test's `sandbox_runtime` unless the policy names one; the pools are
    off unless the policy has a `[pool]` section (the browser's: a `[browser] pool`);
    `store=URL` keeps the records there.
    Its sandboxes run on `engine_side`."""

    def make(
        policy: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        store: str | None = None,
    ) -> MCPServer:
        policy = dict(policy or {})
        policy["sandbox"] = {"runtime": sandbox_runtime, **policy.get("sandbox", {})}
        policy.setdefault("pool", {"size": 0})
        # Warm browsers likewise only where a test asks for them (each holds a Chromium).
        policy["browser"] = {"pool": 0, **policy.get("browser", {})}
        config = Config(data_dir=data_dir, store_url=store)
        return build_server(
            config, Policy.model_validate(policy), clock=clock, engine_side=engine_side
        )

    return make


# ---- real upstream servers for the egress tests (tests/upstream.py) ----------------------


@pytest.fixture(scope="session")
def upstream_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def upstream_ca_file(upstream_ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The upstreams' CA certificate, for a policy's `egress.upstream_ca_file`."""
    path = tmp_path_factory.mktemp("upstream-ca") / "ca.pem"
    upstream_ca.cert_pem.write_to_path(str(path))
    return path


@pytest.fixture
def upstream(upstream_ca: trustme.CA) -> Iterator[Upstream]:
    server = start_upstream(upstream_ca)
    yield server
    server.close()


@pytest.fixture
def other_upstream(upstream_ca: trustme.CA) -> Iterator[Upstream]:
    server = start_upstream(upstream_ca)
    yield server
    server.close()


@pytest.fixture
def plain_upstream() -> Iterator[Upstream]:
    server = start_upstream(None)
    yield server
    server.close()
