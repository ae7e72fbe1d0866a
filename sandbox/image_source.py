"""Where a server's sandbox image comes from when it is not built here: a reference in the
policy (`[sandbox] image`), pulled from the team's registry when the engine lacks it and
checked to be an Airlock sandbox image whose in-container runner is this server's; and the
other way, publishing the built image or its base (`airlock image push`).

Belongs here: that choice, the label check, and what push publishes. Not here: the transfer
itself (`sandbox/registry.py`), the recipe and the build (`sandbox/image.py`). A replica must
never run a sandbox whose runner does not match its host side: the check reads the labels
`airlock image build` sets (`airlock.image`, and `airlock.inside`, the hash of the
in-container code) on every start, for an image pulled now or found in the engine.
"""

from __future__ import annotations

import docker

from airlock.errors import ImageUnavailable
from airlock.policies.references import parse_reference

from .image import (
    IMAGE_LABEL,
    INSIDE_LABEL,
    ImageInputs,
    build_image,
    ensure_base,
    inside_digest,
)
from .image_build import Progress, engine_errors, image_exists
from .registry import pull, push, push_target

_PUSH_FIX = (
    "build and publish one with this Airlock (`airlock image push REGISTRY`) and put the "
    "reference it prints in [sandbox] image"
)


def policy_image(client: docker.DockerClient, reference: str, progress: Progress) -> str:
    """The image [sandbox] image names, pulled if the engine lacks it (by digest when the
    reference has one) and checked; returns the name to create containers from."""
    wanted = parse_reference(reference).pinned
    if not image_exists(client, wanted):
        with engine_errors():
            pull(client, parse_reference(reference), progress)
    check_sandbox_image(client, wanted)
    return wanted


def check_sandbox_image(client: docker.DockerClient, name: str) -> None:
    """`ImageUnavailable` naming the fix unless `name` is an Airlock sandbox image whose
    in-container code is this server's."""
    with engine_errors():
        labels = client.images.get(name).labels or {}
    if labels.get(IMAGE_LABEL) != "1":
        raise ImageUnavailable(
            f"{name}, named by [sandbox] image, is not an Airlock sandbox image (it lacks "
            f"the label {IMAGE_LABEL} that `airlock image build` sets): {_PUSH_FIX}"
        )
    ours = inside_digest()
    theirs = labels.get(INSIDE_LABEL, "")
    if theirs != ours:
        built_by = labels.get("airlock.version", "an unknown version")
        found = f"{INSIDE_LABEL}={theirs[:12]}" if theirs else f"no {INSIDE_LABEL} label"
        raise ImageUnavailable(
            f"{name}, named by [sandbox] image, carries an in-container runner of another "
            f"Airlock ({found}, built by Airlock {built_by}; this server's is {ours[:12]}), "
            f"and a runner must match its host side: {_PUSH_FIX}"
        )


def push_sandbox(
    client: docker.DockerClient, inputs: ImageInputs, registry: str, progress: Progress
) -> str:
    """Build the sandbox image if missing, push it to `registry`; `repository@sha256:...`."""
    local = build_image(client, progress, inputs)
    name, _, tag = local.partition(":")
    return push(client, local, push_target(registry, name, tag), progress)


def push_base(
    client: docker.DockerClient, inputs: ImageInputs, registry: str, progress: Progress
) -> str:
    """Bootstrap (or pull) the base if missing, push it to `registry`; `repository@sha256:...`."""
    local = ensure_base(client, progress, inputs)
    reference = parse_reference(local)
    name = reference.path.rsplit("/", 1)[-1]
    return push(client, local, push_target(registry, name, reference.tag or "latest"), progress)
