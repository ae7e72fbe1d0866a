"""The sandbox image: its content-derived tag, the shape of the built image, and reuse."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
from support import make_wheel

from airlock.errors import EngineUnavailable, ImageUnavailable
from airlock.sandbox.build_stages import StageTracker, remove_stages
from airlock.sandbox.image import (
    RUNNER_PATH,
    STATX_SHIM_PATH,
    ImageInputs,
    build_image,
    ensure_image,
    image_tag,
    offline_base_tag,
)
from airlock.sandbox.image_build import image_exists
from airlock.sandbox.pylock import parse_lock

# The first Docker test may build the image: the Debian base takes minutes (7.5 on a busy
# 2-core machine), the layer 1 to 4 more.
pytestmark = pytest.mark.timeout(900)

ENTRYPOINT = ["/usr/bin/python3", "-I", "-S", "/opt/airlock/inside/boot.py"]


@pytest.fixture
def unreachable_client() -> Iterator[docker.DockerClient]:
    # TCP port 1 refuses the connection. (A missing unix socket would do as well, but the
    # SDK's unix transport leaks the socket of a failed connect, which pytest reports.)
    # A pinned API version keeps the constructor from asking the engine for one.
    client = docker.DockerClient(base_url="tcp://127.0.0.1:1", version="1.41")
    yield client
    client.close()


@pytest.fixture
def runner(tmp_path: Path) -> Path:
    path = tmp_path / "runner.py"
    path.write_bytes(b"print('runner')\n")
    return path


@pytest.fixture
def client(docker_client: docker.DockerClient) -> docker.DockerClient:
    """The engine, from conftest (which fails instead of skipping in CI)."""
    return docker_client


@pytest.fixture
def image(client: docker.DockerClient) -> str:
    return ensure_image(client, lambda message: None, runner=RUNNER_PATH)


def run_in(client: docker.DockerClient, tag: str, *argv: str, user: str = "1000:1000") -> str:
    output = client.containers.run(
        tag,
        entrypoint=argv[0],
        command=list(argv[1:]),
        user=user,
        network_mode="none",
        read_only=True,
        remove=True,
    )
    assert isinstance(output, bytes)
    return output.decode()


def test_tag_changes_when_runner_bytes_change(runner: Path) -> None:
    first = image_tag(runner=runner)
    assert image_tag(runner=runner) == first
    runner.write_bytes(b"print('runner, changed')\n")
    assert image_tag(runner=runner) != first
    assert first.startswith("airlock-sandbox:")


def test_missing_runner_is_image_unavailable(tmp_path: Path) -> None:
    with pytest.raises(ImageUnavailable, match="runner"):
        image_tag(runner=tmp_path / "absent.py")


def test_unreachable_engine_is_engine_unavailable(
    unreachable_client: docker.DockerClient,
) -> None:
    with pytest.raises(EngineUnavailable, match="start the Docker engine"):
        image_exists(unreachable_client, "airlock-sandbox:any")


def test_missing_debootstrap_names_the_install_command(
    unreachable_client: docker.DockerClient,
    runner: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    # force skips the "already built?" questions, so the engine is never asked.
    with pytest.raises(ImageUnavailable, match="apt-get install debootstrap"):
        build_image(unreachable_client, lambda message: None, force=True, runner=runner)


def test_offline_base_without_root_says_root_is_needed(
    unreachable_client: docker.DockerClient, runner: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ImageUnavailable, match="needs root"):
        build_image(unreachable_client, lambda message: None, force=True, runner=runner)


@pytest.mark.docker
def test_image_runs_the_runner_as_the_sandbox_user(client: docker.DockerClient, image: str) -> None:
    config = client.images.get(image).attrs["Config"]
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"] == ENTRYPOINT
    assert config["WorkingDir"] == "/workspace"
    assert config["Labels"]["airlock.image"] == "1"


@pytest.mark.docker
def test_image_python_is_3_11(client: docker.DockerClient, image: str) -> None:
    version = run_in(client, image, "/usr/bin/python3", "-c", "import sys;print(sys.version)")
    assert version.startswith("3.11.")


@pytest.mark.docker
def test_runner_is_root_owned_and_workspace_belongs_to_sandbox(
    client: docker.DockerClient, image: str
) -> None:
    names = ("__init__.py", "wire.py", "codeproc.py", "boot.py", "runner.py", "prestart.py")
    modules = [f"/opt/airlock/inside/{name}" for name in names]
    listing = run_in(
        client,
        image,
        "/usr/bin/stat",
        "-c",
        "%u:%g %a %n",
        "/opt/airlock/inside",
        *modules,
        "/workspace",
    )
    assert listing.splitlines() == [
        "0:0 755 /opt/airlock/inside",
        *(f"0:0 644 {module}" for module in modules),
        "1000:1000 755 /workspace",
    ]


@pytest.mark.docker
def test_the_statx_shim_is_preloaded_and_only_root_can_change_it(
    client: docker.DockerClient, image: str
) -> None:
    """/etc/ld.so.preload runs its library in every program: the sandbox user must not be
    able to replace either (and the root filesystem is read-only besides)."""
    listing = run_in(
        client,
        image,
        "/usr/bin/stat",
        "-c",
        "%u:%g %a %n",
        "/etc/ld.so.preload",
        os.path.dirname(STATX_SHIM_PATH),
        STATX_SHIM_PATH,
    )
    assert listing.splitlines() == [
        "0:0 644 /etc/ld.so.preload",
        f"0:0 755 {os.path.dirname(STATX_SHIM_PATH)}",
        f"0:0 755 {STATX_SHIM_PATH}",
    ]
    assert run_in(client, image, "/usr/bin/cat", "/etc/ld.so.preload") == f"{STATX_SHIM_PATH}\n"
    maps = run_in(client, image, "/usr/bin/cat", "/proc/self/maps")
    assert STATX_SHIM_PATH in maps


@pytest.mark.docker
def test_image_has_no_setuid_or_setgid_files(client: docker.DockerClient, image: str) -> None:
    # As root, so that no directory is hidden from find.
    found = run_in(
        client, image, "/usr/bin/find", "/", "-xdev", "-type", "f", "-perm", "/6000", user="0:0"
    )
    assert found == ""


@pytest.mark.docker
def test_a_lock_with_a_wrong_hash_fails_the_build_naming_the_package(
    client: docker.DockerClient, image: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pip finds the package only in a local directory: no index, no network.
    index = tmp_path / "index"
    index.mkdir()
    make_wheel(index)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    lock = parse_lock(f"airlock-probe==1.0 --hash=sha256:{'0' * 64}\n", "wrong.lock")
    reported: list[str] = []
    with pytest.raises(ImageUnavailable, match=r"airlock[-_]probe==1\.0") as raised:
        build_image(client, reported.append, ImageInputs(python_lock=lock))
    assert "hash" in str(raised.value)
    assert not image_exists(client, image_tag(ImageInputs(python_lock=lock)))
    # The base was reused, not bootstrapped again, and the steps were reported.
    assert any(line.startswith("step 2/3") for line in reported)
    assert not any(line.startswith("debootstrap") for line in reported)


@pytest.mark.docker
def test_ensure_image_again_reuses_the_built_image(client: docker.DockerClient, image: str) -> None:
    built_id = client.images.get(image).id
    reported: list[str] = []
    assert ensure_image(client, reported.append, runner=RUNNER_PATH) == image
    assert client.images.get(image).id == built_id
    assert reported == []


@pytest.mark.docker
def test_a_multi_stage_build_leaves_no_untagged_stage_behind(
    client: docker.DockerClient, image: str
) -> None:
    """The engine's real output for a two-stage build on the image's own base: the first
    stage's result is found and removed once the build is done; the base and the result
    stay. (The sandbox image's wheels stage alone left 1.2 GB untagged.)"""
    base = offline_base_tag()
    dockerfile = (
        f"FROM {base} AS first\nRUN echo one > /one\nFROM {base}\nCOPY --from=first /one /one\n"
    )
    tag = "airlock-test-stages:latest"
    stages, said = StageTracker(), list[str]()
    try:
        for event in client.api.build(
            fileobj=io.BytesIO(dockerfile.encode()),
            tag=tag,
            rm=True,
            forcerm=True,
            nocache=True,
            decode=True,
            network_mode="none",
        ):
            for line in str(event.get("stream", "")).splitlines():
                stages.feed(line)
        assert len(stages.stages) == 1, "the first stage's image was not found in the output"
        (first,) = stages.stages
        assert not client.images.get(first).tags  # untagged: the leftover this removes
        remove_stages(client, stages.stages, said.append)
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(first)
        assert client.images.get(base).tags and client.images.get(tag).tags and said == []
    finally:
        client.images.remove(tag, force=True)
