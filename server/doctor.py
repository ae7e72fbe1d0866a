"""`airlock doctor`: what is missing to run sandboxes, and the command that fixes it.

Once the engine and the image are there, it runs one sandbox as every run gets it (the
policy's runtime, image and limits) to check that the commands an agent runs first work:
some gVisor releases break `ls -l` and `stat` (see `drill_probes.EVERYDAY`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio

from airlock.errors import AirlockError
from airlock.ids import new_id
from airlock.policies import Policy, load_policy
from airlock.policies.references import parse_reference
from airlock.sandbox import ArtifactCaps, DockerBackend, JobOutcome, JobSpec, connect, limits_of
from airlock.sandbox.browser_image import browser_image_tag
from airlock.sandbox.docker import EngineClient, engine_version, registered_runtimes
from airlock.sandbox.environment import sandbox_environment
from airlock.sandbox.image import (
    ImageInputs,
    base_exists,
    base_reference,
    image_inputs,
    image_tag,
)
from airlock.sandbox.image_build import image_exists
from airlock.sandbox.image_source import check_sandbox_image
from airlock.sandbox.instance import Instance
from airlock.sandbox.runtime import AUTO, GVISOR, REGISTER_GVISOR, choose_runtime
from airlock.store import BlobStore, private_dir

from .config import Config
from .drill_probes import EVERYDAY, EVERYDAY_FIX, PRELUDE, judge_everyday, report_of
from .secret_check import missing_secrets

# Generous: a cold sandbox under gVisor on a busy machine takes seconds, not minutes.
EVERYDAY_TIMEOUT_S = 60


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
    yield from _store(config)
    if policy is not None:
        yield from _secrets(policy, config)
    try:
        client = connect()
    except AirlockError as exc:
        yield _engine_unreachable(exc, os.environ.get("DOCKER_HOST"))
        return
    yield Check("docker", True, f"engine {engine_version(client)} reachable")
    yield _runtime(policy.sandbox.runtime if policy is not None else AUTO, client)
    configured = policy.sandbox.image if policy is not None else None
    try:
        inputs = image_inputs(policy.image) if policy is not None else ImageInputs()
    except AirlockError as exc:
        yield Check("image", False, str(exc), "correct [image] in the policy")
        return
    if configured is not None:
        yield from _pulled_image(client, policy, configured)
    else:
        yield from _built_image(client, policy, inputs, config)
    yield _browser_image(client)


def _browser_image(client: EngineClient) -> Check:
    """The image `browse` runs: without it the first browse builds it, for minutes."""
    tag = browser_image_tag()
    if image_exists(client, tag):
        return Check("browser image", True, f"{tag}: present")
    return Check(
        "browser image",
        True,
        f"{tag} is not built: the first browse builds it (minutes), answering that it is "
        "building until then",
        "airlock image build --browser",
        warning=True,
    )


def _pulled_image(client: EngineClient, policy: Policy | None, configured: str) -> Iterator[Check]:
    """[sandbox] image: pulled from a registry by the server when absent, then checked."""
    reference = parse_reference(configured)
    name = reference.pinned
    source = f"pulled from {reference.registry} by [sandbox] image"
    if not image_exists(client, name):
        yield Check(
            "image",
            False,
            f"{name} ({source}) is not in the engine yet (`airlock serve` pulls it on first use)",
            f"docker pull {name}; or correct [sandbox] image (`airlock image push` prints it)",
        )
        return
    try:
        check_sandbox_image(client, name)
    except AirlockError as exc:
        yield Check("image", False, str(exc), "see the message")
        return
    yield Check("image", True, f"{name} ({source}): present, runner matches this Airlock")
    if policy is not None:
        yield _everyday_commands(client, policy, name)


def _built_image(
    client: EngineClient, policy: Policy | None, inputs: ImageInputs, config: Config
) -> Iterator[Check]:
    """The image Airlock builds, on the debootstrapped base or on [image] base."""
    tag = image_tag(inputs)
    base = base_reference(inputs)
    source = f"built locally on base {base} from [image] base" if inputs.base else "built locally"
    if image_exists(client, tag):
        yield Check("image", True, f"{tag} ({source}): present")
        if policy is not None:
            yield _everyday_commands(client, policy, tag)
        return
    # The tag is this policy's (its [image] lock): a build without it makes another.
    build = "airlock image build" + _policy_option(config)
    yield Check(
        "image",
        False,
        f"{tag} ({source}) is not built yet (`airlock serve` builds it on first use)",
        build,
    )
    if inputs.base is not None:
        present = base_exists(client, inputs)
        yield Check(
            "base",
            present,
            f"{base} ([image] base): "
            + ("present" if present else "not in the engine yet (the build pulls it)"),
            "" if present else f"docker pull {base}; or correct [image] base",
        )
        return
    if base_exists(client, inputs):
        return
    # Only the Debian base needs these; the layer on top is built by the engine.
    if shutil.which("debootstrap") is None:
        yield Check(
            "debootstrap",
            False,
            "needed to build the image offline (or name a published base in [image] base)",
            "apt-get install debootstrap",
        )
    if os.geteuid() != 0:
        yield Check(
            "root",
            False,
            "building the image's Debian base needs root: debootstrap creates device "
            "nodes and runs package scripts in a chroot",
            f"sudo .venv/bin/{build}  (once; serving needs no root, only "
            "access to the Docker socket; or name a published base in [image] base)",
        )


def _policy_option(config: Config) -> str:
    """The `--policy` a fix command needs to act on the policy doctor checked."""
    if config.policy_path is None:
        return ""
    return f" --policy {shlex.quote(str(config.policy_path))}"


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


def _runtime(wanted: str, client: EngineClient) -> Check:
    try:
        choice = choose_runtime(wanted, registered_runtimes(client))
    except AirlockError as exc:
        return Check("runtime", False, str(exc), REGISTER_GVISOR)
    if choice.warning:
        return Check("runtime", True, choice.warning, REGISTER_GVISOR, warning=True)
    if choice.runtime == GVISOR:
        return Check("runtime", True, "gVisor (runsc) is registered; sandboxes run under it")
    return Check("runtime", True, f'{choice.runtime} (the policy sets runtime = "{wanted}")')


def _everyday_commands(client: EngineClient, policy: Policy, image: str) -> Check:
    try:
        runtime = choose_runtime(policy.sandbox.runtime, registered_runtimes(client)).runtime
        outcome = anyio.run(_run_everyday, client, policy, image, runtime)
    except AirlockError as exc:
        return Check("commands", False, f"could not run a sandbox: {exc}", "see the message")
    if outcome.status == "timeout":
        return Check(
            "commands",
            False,
            f"a sandbox under {runtime} did not finish `ls -la /` in {EVERYDAY_TIMEOUT_S} s",
            "check the engine's load and `docker info`, then run doctor again",
        )
    verdict = judge_everyday(report_of(outcome.stdout.data.decode(errors="replace")))
    if verdict.held:
        return Check("commands", True, f"{verdict.observed} in a sandbox under {runtime}")
    return Check(
        "commands", False, f"in a sandbox under {runtime}: {verdict.observed}", EVERYDAY_FIX
    )


async def _run_everyday(
    client: EngineClient, policy: Policy, image: str, runtime: str
) -> JobOutcome:
    """One run of the everyday-commands probe in a fresh sandbox, removed afterwards."""
    job = JobSpec(
        run_id=new_id("run_"),
        session_id=new_id("ses_"),
        tenant="airlock-doctor",
        image=image,
        runtime=runtime,
        language="python",
        code=PRELUDE + EVERYDAY,
        env=sandbox_environment(),
        timeout_s=EVERYDAY_TIMEOUT_S,
        limits=limits_of(policy),
        stream_cap_bytes=1 << 16,
        artifact_caps=ArtifactCaps(max_files=1, max_file_bytes=1, max_total_bytes=1),
    )
    backend = DockerBackend(client, Instance.current())
    with tempfile.TemporaryDirectory(prefix="airlock-doctor-") as scratch:
        blobs = BlobStore(Path(scratch) / "blobs")
        async with blobs.staging() as staging, backend.sandbox(job, egress=False) as box:
            return await box.run(job, staging)


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


def _store(config: Config) -> Iterator[Check]:
    """The records' database: reachable, and of a schema this Airlock can use; for a fleet,
    then its notification channel (PostgreSQL's LISTEN/NOTIFY)."""
    from airlock.store.status import store_status  # SQLAlchemy: only when doctor runs

    status = store_status(config.store)
    yield Check("store", status.ok, status.detail, status.fix)
    if status.ok and config.fleet_url is not None:
        from airlock.store.status import channel_status

        channel = channel_status(config.fleet_url)
        yield Check("fleet", channel.ok, channel.detail, channel.fix)
