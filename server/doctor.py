"""`airlock doctor`: what is missing to run sandboxes, and the command that fixes it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker

from airlock.errors import AirlockError
from airlock.policies import Policy, load_policy
from airlock.sandbox import connect
from airlock.sandbox.docker import registered_runtimes
from airlock.sandbox.image import ImageInputs, base_exists, image_exists, image_inputs, image_tag
from airlock.sandbox.runtime import AUTO, GVISOR, REGISTER_GVISOR, choose_runtime
from airlock.store import private_dir

from .config import Config
from .secret_check import missing_secrets


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False
    """Works, but not as well as it could: `fix` says how; not counted as a problem."""


def run_checks(config: Config) -> Iterator[Check]:
    try:
        policy = load_policy(config.policy_path)
        yield Check("policy", True, str(config.policy_path or "built-in default"))
    except AirlockError as exc:
        policy = None
        yield Check("policy", False, str(exc), "correct the policy file, or unset AIRLOCK_POLICY")
    yield _data_dir(config.data_dir)
    if policy is not None:
        yield from _secrets(policy, config)
    try:
        client = connect()
    except AirlockError as exc:
        yield _engine_unreachable(exc, os.environ.get("DOCKER_HOST"))
        return
    yield Check("docker", True, f"engine {client.version().get('Version', '?')} reachable")
    yield _runtime(policy.sandbox.runtime if policy is not None else AUTO, client)
    configured = policy.sandbox.image if policy is not None else None
    try:
        inputs = image_inputs(policy.image) if policy is not None else ImageInputs()
    except AirlockError as exc:
        yield Check("image", False, str(exc), "correct [image] in the policy")
        return
    tag = configured or image_tag(inputs)
    if image_exists(client, tag):
        yield Check("image", True, tag)
    elif configured:
        yield Check(
            "image",
            False,
            f"{tag} (named by [sandbox] image in the policy) is not in the engine",
            f"docker pull {tag}; or build it under that name, or correct [sandbox] image",
        )
    else:
        yield Check(
            "image",
            False,
            f"{tag} is not built yet (`airlock serve` builds it on first use)",
            "airlock image build",
        )
        if base_exists(client, inputs):
            return
        # Only the Debian base needs these; the layer on top is built by the engine.
        if shutil.which("debootstrap") is None:
            yield Check(
                "debootstrap",
                False,
                "needed to build the image offline",
                "apt-get install debootstrap",
            )
        if os.geteuid() != 0:
            yield Check(
                "root",
                False,
                "building the image's Debian base needs root: debootstrap creates device "
                "nodes and runs package scripts in a chroot",
                "sudo .venv/bin/airlock image build  (once; serving needs no root, only "
                "access to the Docker socket)",
            )


def _engine_unreachable(exc: AirlockError, docker_host: str | None) -> Check:
    # The engine's own words, without the advice to run doctor: this is doctor.
    cause = exc.__cause__ or exc
    if docker_host:
        return Check(
            "docker",
            False,
            f"cannot reach the engine at DOCKER_HOST={docker_host} ({cause})",
            "start the engine DOCKER_HOST names, or correct DOCKER_HOST (or unset it to use "
            "the local socket /var/run/docker.sock)",
        )
    return Check(
        "docker",
        False,
        f"cannot reach the engine at the local socket /var/run/docker.sock ({cause})",
        "install and start Docker: `apt-get install docker.io && dockerd &` "
        "(or `systemctl start docker`)",
    )


def _secrets(policy: Policy, config: Config) -> Iterator[Check]:
    try:
        missing = missing_secrets(policy, config.data_dir, os.environ)
    except AirlockError as exc:
        yield Check("secrets", False, str(exc), "fix the vault key (see the message)")
        return
    for gap in missing:
        yield Check("secret", False, str(gap), f"{gap.command}  (value on stdin)")


def _runtime(wanted: str, client: docker.DockerClient) -> Check:
    try:
        choice = choose_runtime(wanted, registered_runtimes(client))
    except AirlockError as exc:
        return Check("runtime", False, str(exc), REGISTER_GVISOR)
    if choice.warning:
        return Check("runtime", True, choice.warning, REGISTER_GVISOR, warning=True)
    if choice.runtime == GVISOR:
        return Check("runtime", True, "gVisor (runsc) is registered; sandboxes run under it")
    return Check("runtime", True, f'{choice.runtime} (the policy sets runtime = "{wanted}")')


def _data_dir(path: Path) -> Check:
    try:
        # As the server would: every missing level 0700, and a wider one of ours tightened.
        private_dir(path)
        with tempfile.NamedTemporaryFile(dir=path):
            pass
    except OSError as exc:
        return Check(
            "data dir",
            False,
            f"{path} is not writable ({exc.strerror})",
            "choose another with --data-dir or AIRLOCK_DATA_DIR",
        )
    mode = os.stat(path).st_mode & 0o777
    note = "" if mode & 0o077 == 0 else f" (mode {mode:o}: readable by others; chmod 700 it)"
    return Check("data dir", True, f"{path}{note}")
