"""The server across a restart of its Docker engine: no call waits on a dead container.

The shared engine must never be restarted (other tests use it), so these tests start an
engine of their own: a second dockerd with its own data root, exec root, pidfile and
unix socket under a temporary directory, no bridge, no iptables, gVisor registered in
its own config file, and the real sandbox image copied in from the shared engine
(`docker save` streamed into `docker load`: 35 to 50 s for the 1 GB image on a busy
two-core machine, once per test session; an image build would take ten minutes). The
server reaches it through DOCKER_HOST, as an operator's server would.

Needs root and `dockerd`; without them the tests skip locally and fail in CI
(AIRLOCK_REQUIRE_DOCKER=1).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from mcp.client import Client
from support import text_of, wait_until

from airlock.policies import Policy
from airlock.sandbox.runtime import DAEMON_JSON
from airlock.server import Config, build_server
from airlock.server.metrics import Metrics

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

REQUIRE_DOCKER = os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1"
POOL_SIZE = 2
# Bounds, not targets: a call after the restart gets a new container (a cold start of a
# few seconds under gVisor on a busy machine), where the old code waited the run's
# timeout plus 15 s on each dead pooled one.
PROMPTLY_S = 20
ENGINE_START_S = 60
# The image, a few containers' layers and their tmpfs mounts' worth of headroom.
ENGINE_ROOM = 4 << 30


@dataclass
class PrivateEngine:
    """A dockerd of the tests' own, which they may stop and start at will."""

    root: Path
    token: str = field(default_factory=lambda: os.urandom(4).hex())
    process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"unix://{self.root / 'docker.sock'}"

    def command(self) -> list[str]:
        return [
            "dockerd",
            f"--data-root={self.root / 'data'}",
            f"--exec-root={self.root / 'exec'}",
            f"--pidfile={self.root / 'dockerd.pid'}",
            f"--host={self.host}",
            f"--config-file={self.root / 'daemon.json'}",
            "--bridge=none",
            "--iptables=false",
            # Should the host run a system containerd, keep clear of the shared engine's.
            f"--containerd-namespace=airlock-test-{self.token}",
            f"--containerd-plugins-namespace=airlock-test-plugins-{self.token}",
        ]

    def start(self) -> None:
        log = (self.root / "dockerd.log").open("ab")
        with log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + ENGINE_START_S
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the private dockerd did not start:\n{self.log_tail()}")
            # No event says "the engine answers"; ask again shortly.
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the engine as `systemctl stop docker` does (SIGTERM) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=ENGINE_START_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.host, timeout=120)

    def log_tail(self) -> str:
        return (self.root / "dockerd.log").read_text(errors="replace")[-3000:]

    def answers(self) -> bool:
        # A bare request: the SDK's client asks for the version as it is made, and leaves
        # its socket open when the engine is not there yet.
        with socket.socket(socket.AF_UNIX) as engine:
            try:
                engine.connect(str(self.root / "docker.sock"))
                engine.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
                return engine.recv(64).startswith(b"HTTP/1.0 200")
            except OSError:
                return False


def _unavailable(reason: str) -> None:
    if REQUIRE_DOCKER:
        pytest.fail(f"the engine-restart tests need a private dockerd (required): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def private_engine(
    docker_client: docker.DockerClient, sandbox_image: str
) -> Iterator[PrivateEngine]:
    if shutil.which("dockerd") is None:
        _unavailable("dockerd is not installed")
    if os.geteuid() != 0:
        _unavailable("starting a dockerd needs root")
    engine = PrivateEngine(Path(tempfile.mkdtemp(prefix="airlock-engine-", dir=_engine_parent())))
    # gVisor registered exactly as the README tells operators to.
    (engine.root / "daemon.json").write_text(DAEMON_JSON)
    try:
        try:
            engine.start()
        except (OSError, RuntimeError) as exc:
            _unavailable(str(exc))
        client = engine.client()
        try:
            chunks = docker_client.api.get_image(sandbox_image)
            # types-docker leaves load_image untyped.
            for line in client.api.load_image(chunks):  # type: ignore[no-untyped-call]
                if "error" in line:
                    raise RuntimeError(f"loading {sandbox_image}: {line['error']}")
        finally:
            client.close()
        yield engine
    finally:
        _clean_up(engine)


def _engine_parent() -> str:
    """Memory when there is room: deleting the image's 1 GB of small files from the
    machine's disk took 12 to 70 s, from memory 2. Short either way, because containerd's
    sockets live under the exec root."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shutil.disk_usage(shm).free > ENGINE_ROOM:
        return str(shm)
    return "/tmp"


def _clean_up(engine: PrivateEngine) -> None:
    try:
        if engine.process is not None and engine.process.poll() is None and engine.answers():
            client = engine.client()
            try:
                for container in client.api.containers(all=True):
                    client.api.remove_container(container["Id"], force=True, v=True)
            finally:
                client.close()
    finally:
        engine.stop()
        shutil.rmtree(engine.root, ignore_errors=True)


@dataclass
class Served:
    client: Client
    metrics: Metrics

    def pool_ready(self) -> float:
        return self.metrics.registry.get_sample_value("airlock_pool_ready") or 0.0

    async def run(self, code: str, **args: Any) -> dict[str, Any]:
        with anyio.fail_after(PROMPTLY_S):
            result = await self.client.call_tool("run_code", {"code": code, **args})
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None
        content: dict[str, Any] = result.structured_content
        return content


@asynccontextmanager
async def serve_on(
    engine: PrivateEngine, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Served]:
    """A server with the default policy (runtime "auto": gVisor) and a pool of two, on
    `engine`, once its pool is full."""
    monkeypatch.setenv("DOCKER_HOST", engine.host)
    metrics = Metrics()
    # The browser's warm boxes off: the pool's gauge then counts run boxes alone.
    policy = Policy.model_validate({"pool": {"size": POOL_SIZE}, "browser": {"pool": 0}})
    server = build_server(Config(data_dir=data_dir), policy, metrics=metrics)
    async with Client(server) as client:
        served = Served(client, metrics)
        await served.run("print('warm up')")
        await wait_until(lambda: served.pool_ready() == POOL_SIZE, within=60)
        yield served


def pooled_running(engine: PrivateEngine) -> list[str]:
    """The engine's running containers that wait for a job (no run label yet)."""
    client = engine.client()
    try:
        found = client.api.containers(filters={"status": "running"})
    finally:
        client.close()
    return [c["Id"] for c in found if (c.get("Labels") or {}).get("airlock.run") == ""]


async def restart(engine: PrivateEngine) -> None:
    def stop_and_start() -> None:
        engine.stop()
        engine.start()

    await anyio.to_thread.run_sync(stop_and_start)


async def test_after_the_engine_restarts_the_next_call_runs_at_once_and_keeps_the_files(
    private_engine: PrivateEngine, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve_on(private_engine, data_dir, monkeypatch) as served:
        first = await served.run("open('kept.txt', 'w').write('before the restart')")
        session = first["session_id"]
        await wait_until(lambda: len(pooled_running(private_engine)) == POOL_SIZE, within=60)
        before = set(pooled_running(private_engine))

        await restart(private_engine)
        # Every pooled container went with the engine (exit 143); a call must not take one.
        after = await served.run("print(open('kept.txt').read())", session_id=session)
        assert after["status"] == "ok", after
        assert after["stdout"]["text"] == "before the restart\n"
        assert after["session_id"] == session

        # And the pool fills again, with new containers.
        await wait_until(lambda: served.pool_ready() == POOL_SIZE, within=60)
        refilled = set(pooled_running(private_engine))
        assert len(refilled) == POOL_SIZE and not refilled & before
        warm = await served.run("print(2)", session_id=session)
        assert warm["stdout"]["text"] == "2\n"


async def test_a_call_while_the_engine_is_down_is_told_to_start_it_and_the_next_runs(
    private_engine: PrivateEngine, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve_on(private_engine, data_dir, monkeypatch) as served:
        await anyio.to_thread.run_sync(private_engine.stop)
        try:
            with anyio.fail_after(PROMPTLY_S):
                down = await served.client.call_tool("run_code", {"code": "print(1)"})
        finally:
            await anyio.to_thread.run_sync(private_engine.start)
        assert down.is_error
        text = text_of(down)
        assert "cannot reach the Docker engine" in text and "start it" in text, text
        back = await served.run("print('back')")
        assert back["stdout"]["text"] == "back\n"
