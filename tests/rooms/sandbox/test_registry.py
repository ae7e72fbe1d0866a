"""The sandbox image from the team's registry: `airlock image push`, `[sandbox] image` pulled
and checked, `[image] base` built on, against a real registry (tests/registry.py) and the real
engine.

Every image name a test creates lives under a repository of this session's own
(`<registry>/t<random>/...`), and the test removes the local names it made; an image of
someone else is never removed (removing a name the shared sandbox image also carries only
untags it). Pulls of the sandbox image find its layers in the engine already, so they move
manifests, not gigabytes; the one full upload is the session's first push (~40 s here).
"""

from __future__ import annotations

import contextlib
import io
import re
import secrets
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import docker
import docker.errors
import pytest
from mcp.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent
from support import AIRLOCK

from airlock.errors import ImageUnavailable
from airlock.policies import Policy
from airlock.policies.references import parse_reference
from airlock.sandbox.image import (
    INSIDE_LABEL,
    ImageInputs,
    base_reference,
    image_inputs,
    image_tag,
    inside_digest,
    offline_base_tag,
)
from airlock.sandbox.image_build import image_exists
from airlock.sandbox.image_source import policy_image
from airlock.sandbox.registry import push, push_target

# The base build runs the sandbox layer again (its pip step is never cached): 1 to 4 minutes.
pytestmark = pytest.mark.timeout(900)

DIGESTED = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
PULL_TIMEOUT_S = 300


@dataclass(frozen=True)
class Pushed:
    reference: str
    """What `airlock image push` printed: repository@sha256:..."""
    tag: str
    """The repository:tag it pushed under (a local name it created)."""
    stderr: str


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AIRLOCK, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def untag(client: docker.DockerClient, name: str) -> None:
    """Remove a local name this test made; the image stays if another name holds it."""
    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.remove(name)


@pytest.fixture(scope="session")
def space(registry_address: str) -> str:
    """This session's own repository prefix on the registry."""
    return f"{registry_address}/t{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def pushed_sandbox(
    docker_client: docker.DockerClient, sandbox_image: str, space: str
) -> Iterator[Pushed]:
    done = cli("image", "push", f"{space}/airlock-sandbox")
    assert done.returncode == 0, done.stderr
    tag = f"{space}/airlock-sandbox:{sandbox_image.partition(':')[2]}"
    yield Pushed(done.stdout.strip(), tag, done.stderr)
    untag(docker_client, tag)
    untag(docker_client, done.stdout.strip())


@pytest.fixture
def clean(docker_client: docker.DockerClient) -> Iterator[Callable[[str], str]]:
    """`clean(name)`: remove the local name now (so the next use must pull) and at the end."""
    names: list[str] = []

    def remove(name: str) -> str:
        untag(docker_client, name)
        assert not image_exists(docker_client, name)
        names.append(name)
        return name

    yield remove
    for name in names:
        untag(docker_client, name)


async def run_until_pulled(server: MCPServer) -> tuple[bool, str, Any]:
    """Call run_code as an agent would, retrying while the server says the image is being
    pulled; the last answer."""
    async with Client(server) as client:
        with anyio.fail_after(PULL_TIMEOUT_S):
            while True:
                result = await client.call_tool("run_code", {"code": "print(6 * 7)"})
                block = result.content[0]
                assert isinstance(block, TextContent)
                if "being pulled" not in block.text:
                    return result.is_error, block.text, result.structured_content
                await anyio.sleep(0.2)


# ---- references and push targets (no engine) --------------------------------------------


@pytest.mark.parametrize(
    ("text", "repository", "pinned"),
    [
        ("127.0.0.1:5000/airlock-sandbox", "127.0.0.1:5000/airlock-sandbox", ":latest"),
        ("localhost/team/x:1", "localhost/team/x", ":1"),
        ("example/sandbox:1", "example/sandbox", ":1"),
        (f"r.example/a:1@sha256:{'a' * 64}", "r.example/a", f"@sha256:{'a' * 64}"),
    ],
)
def test_a_reference_is_read_as_docker_reads_it(text: str, repository: str, pinned: str) -> None:
    reference = parse_reference(text)
    assert reference.repository == repository
    assert reference.pinned == repository + pinned


@pytest.mark.parametrize(
    ("section", "value", "reason"),
    [
        ("sandbox", "Team/Sandbox:1", "is not an image reference: write [registry[:port]/]name"),
        ("sandbox", "r.example/a@sha256:12", "malformed digest 'sha256:12': write sha256: and 64"),
        ("image", "r.example/base:-1", "malformed tag '-1'"),
        ("image", "r.example/base@md5:00", "malformed digest"),
    ],
)
def test_a_malformed_reference_in_the_policy_is_refused_saying_what_to_write(
    tmp_path: Path, section: str, value: str, reason: str
) -> None:
    key = "image" if section == "sandbox" else "base"
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[{section}]\n{key} = "{value}"\n')
    done = cli("policy", "check", str(policy))
    assert done.returncode == 1
    assert f"{section}.{key}" in done.stderr + done.stdout
    assert reason in done.stderr + done.stdout


def test_a_push_target_must_name_its_registry_and_no_digest() -> None:
    assert push_target("127.0.0.1:5000", "airlock-sandbox", "1").pinned == (
        "127.0.0.1:5000/airlock-sandbox:1"
    )
    assert push_target("r.example/team/box:7", "airlock-sandbox", "1").pinned == (
        "r.example/team/box:7"
    )
    with pytest.raises(ImageUnavailable, match=r"names no registry: .*docker\.io/team/box"):
        push_target("team/box", "airlock-sandbox", "1")
    with pytest.raises(ImageUnavailable, match="is not a registry address"):
        push_target("sandbox", "airlock-sandbox", "1")
    with pytest.raises(ImageUnavailable, match="has a digest"):
        push_target(f"r.example/box@sha256:{'b' * 64}", "airlock-sandbox", "1")


def test_a_policy_without_a_base_builds_on_the_bootstrapped_one() -> None:
    assert base_reference(ImageInputs()) == offline_base_tag()
    assert base_reference(ImageInputs(base="r.example/b:1")) == "r.example/b:1"
    assert image_tag(ImageInputs(base="r.example/b:1")) != image_tag()


# ---- push and pull against the real registry --------------------------------------------


@pytest.mark.docker
def test_push_prints_the_digest_and_a_pull_by_it_on_a_clean_name_gets_the_same_image(
    docker_client: docker.DockerClient,
    sandbox_image: str,
    pushed_sandbox: Pushed,
    clean: Callable[[str], str],
) -> None:
    assert DIGESTED.fullmatch(pushed_sandbox.reference), pushed_sandbox.reference
    assert pushed_sandbox.reference.startswith(pushed_sandbox.tag.rpartition(":")[0] + "@")
    assert "pushing " in pushed_sandbox.stderr
    clean(pushed_sandbox.tag)
    reference = clean(pushed_sandbox.reference)
    reported: list[str] = []
    assert policy_image(docker_client, reference, reported.append) == reference
    assert any(line.startswith(f"pulling {reference}") for line in reported), reported
    pulled = docker_client.images.get(reference)
    assert pulled.id == docker_client.images.get(sandbox_image).id
    assert pulled.labels[INSIDE_LABEL] == inside_digest()


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_policy_naming_the_registry_image_serves_run_code_from_it(
    make_server: Callable[..., MCPServer],
    docker_client: docker.DockerClient,
    pushed_sandbox: Pushed,
    clean: Callable[[str], str],
) -> None:
    reference = clean(pushed_sandbox.reference)
    server = make_server({"sandbox": {"image": reference}})
    is_error, text, structured = await run_until_pulled(server)
    assert not is_error, text
    assert structured["stdout"]["text"] == "42\n"
    assert image_exists(docker_client, reference)  # the server pulled it: it was gone


@pytest.mark.docker
def test_build_on_a_base_pulled_from_the_registry(
    docker_client: docker.DockerClient,
    sandbox_image: str,
    space: str,
    clean: Callable[[str], str],
    tmp_path: Path,
) -> None:
    done = cli("image", "push", "--base", f"{space}/airlock-base")
    assert done.returncode == 0, done.stderr
    base = done.stdout.strip()
    assert DIGESTED.fullmatch(base), base
    clean(f"{space}/airlock-base:{offline_base_tag().partition(':')[2]}")
    clean(base)
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[image]\nbase = "{base}"\n')
    built = clean(image_tag(ImageInputs(base=base)))
    done = cli("image", "build", "--policy", str(policy))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"pulling {base}" in done.stderr
    assert f"sandbox image ready: {built}" in done.stderr
    image = docker_client.images.get(built)
    assert image.labels[INSIDE_LABEL] == inside_digest()
    # Built on the very base the bootstrapped build uses: the registry moved it, unchanged.
    assert docker_client.images.get(base).id == docker_client.images.get(offline_base_tag()).id


# ---- what is refused --------------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.anyio
async def test_an_unreachable_registry_is_one_sentence_naming_the_fix_and_nothing_ran(
    make_server: Callable[..., MCPServer], docker_client: docker.DockerClient
) -> None:
    reference = "127.0.0.1:1/airlock-sandbox:1"
    is_error, text, _ = await run_until_pulled(make_server({"sandbox": {"image": reference}}))
    assert is_error
    assert f"cannot pull {reference}" in text
    assert "check that the registry 127.0.0.1:1 is running" in text
    assert not image_exists(docker_client, reference)


@pytest.mark.docker
def test_an_unknown_tag_names_the_push(docker_client: docker.DockerClient, space: str) -> None:
    reference = f"{space}/airlock-sandbox:no-such-tag"
    with pytest.raises(ImageUnavailable) as caught:
        policy_image(docker_client, reference, lambda line: None)
    assert f"has no image {reference}" in str(caught.value)
    assert "push it there with `airlock image push`" in str(caught.value)
    assert not image_exists(docker_client, reference)


def _tiny_image(client: docker.DockerClient, name: str) -> None:
    """An image of one file, made here: no Airlock label at all."""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    repository, _, tag = name.rpartition(":")
    client.api.import_image_from_data(archive.getvalue(), repository=repository, tag=tag)


def _relabelled_image(client: docker.DockerClient, sandbox_image: str, name: str) -> None:
    """The real sandbox image with the inside label of some other Airlock (no new layer)."""
    dockerfile = f"FROM {sandbox_image}\nLABEL {INSIDE_LABEL}={'0' * 64}\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=name, rm=True)


@pytest.mark.docker
@pytest.mark.parametrize(
    ("kind", "refusal"),
    [
        ("foreign", "is not an Airlock sandbox image (it lacks the label airlock.image"),
        ("old", "carries an in-container runner of another Airlock (airlock.inside=000000000000"),
    ],
)
def test_a_registry_image_that_is_not_this_airlocks_sandbox_is_refused(
    docker_client: docker.DockerClient,
    sandbox_image: str,
    pushed_sandbox: Pushed,  # its layers in the registry already: the relabelled push is quick
    space: str,
    clean: Callable[[str], str],
    kind: str,
    refusal: str,
) -> None:
    name = f"{space}/{kind}:1"
    if kind == "foreign":
        _tiny_image(docker_client, name)
    else:
        _relabelled_image(docker_client, sandbox_image, name)
    reference = push(docker_client, name, parse_reference(name), lambda line: None)
    clean(name)
    clean(reference)
    with pytest.raises(ImageUnavailable) as caught:
        policy_image(docker_client, reference, lambda line: None)
    assert refusal in str(caught.value)
    assert "`airlock image push REGISTRY`" in str(caught.value)


@pytest.mark.docker
def test_a_push_to_an_unreachable_registry_fails_naming_the_fix_and_leaves_no_name(
    docker_client: docker.DockerClient, sandbox_image: str
) -> None:
    done = cli("image", "push", "127.0.0.1:1")
    assert done.returncode == 1
    assert "cannot push 127.0.0.1:1/airlock-sandbox:" in done.stderr
    assert "check that the registry 127.0.0.1:1 is running" in done.stderr
    assert done.stdout == ""
    assert not image_exists(docker_client, f"127.0.0.1:1/{sandbox_image}")


# ---- doctor -----------------------------------------------------------------------------


@pytest.mark.docker
def test_doctor_names_where_the_image_comes_from_and_whether_it_is_there(
    docker_client: docker.DockerClient,
    pushed_sandbox: Pushed,
    registry_address: str,
    tmp_path: Path,
) -> None:
    data = str(tmp_path / "data")
    policy = tmp_path / "policy.toml"
    policy.write_text(f'[sandbox]\nimage = "{pushed_sandbox.reference}"\n')
    policy_image(docker_client, pushed_sandbox.reference, lambda line: None)
    done = cli("doctor", "--policy", str(policy), "--data-dir", data)
    assert (
        f"image: {pushed_sandbox.reference} (pulled from {registry_address} by [sandbox] image):"
        " present, runner matches this Airlock"
    ) in done.stdout
    absent = f"r.example.invalid/base@sha256:{'c' * 64}"
    policy.write_text(f'[image]\nbase = "{absent}"\n')
    done = cli("doctor", "--policy", str(policy), "--data-dir", data)
    assert f"(built locally on base {absent} from [image] base)" in done.stdout
    assert f"base: {absent} ([image] base): not in the engine yet" in done.stdout
    assert "debootstrap" not in done.stdout


def test_a_base_reference_in_the_policy_reaches_the_image_inputs() -> None:
    policy = Policy.model_validate({"image": {"base": "r.example/b:1"}})
    assert image_inputs(policy.image).base == "r.example/b:1"
    assert image_inputs(Policy().image).base is None
