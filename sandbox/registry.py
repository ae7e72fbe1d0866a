"""Moving images between the Docker engine and a registry: pull by reference, push under a
name, and the engine's failures turned into `ImageUnavailable` sentences that name the fix.

Belongs here: the engine's pull and push calls, their progress (reported through the
caller's `progress` callback, never printed), and where a push goes (`push_target`). Not here:
which image a server runs or whether it is an Airlock sandbox image (`sandbox/image_source.py`),
building images (`sandbox/image.py`), and reference grammar (`policies/references.py`).

The engine does the transfer; it registers a pulled image only once every layer is in and its
digest checked, so a pull that fails leaves nothing under the reference to run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import docker
import docker.errors
import requests

from airlock.errors import EngineUnavailable, ImageUnavailable
from airlock.policies.references import ImageReference, is_domain, parse_reference

Progress = Callable[[str], None]

# Statuses that repeat for every chunk of a layer: reported by their layer's end instead.
_TICKING = frozenset({"Downloading", "Extracting", "Pushing", "Waiting", "Verifying Checksum"})
_START_DOCKER = "start the Docker engine (e.g. `sudo systemctl start docker` or `dockerd &`)"


def pull(client: docker.DockerClient, reference: ImageReference, progress: Progress) -> None:
    """Pull `reference` (by digest when it has one); `ImageUnavailable` naming the fix when
    the registry is unreachable or does not hold it."""
    wanted = reference.pinned
    progress(f"pulling {wanted} from {reference.registry}")
    tag = reference.digest or reference.tag or "latest"
    try:
        events = client.api.pull(reference.repository, tag=tag, stream=True, decode=True)
        _follow(events, progress)
    except docker.errors.NotFound as exc:
        raise ImageUnavailable(_not_held(wanted, reference, exc)) from exc
    except docker.errors.APIError as exc:
        raise ImageUnavailable(_unreachable("pull", wanted, reference, exc)) from exc
    except _TransferFailed as exc:
        if "not found" in exc.message or "manifest unknown" in exc.message:
            raise ImageUnavailable(_not_held(wanted, reference, exc.message)) from exc
        raise ImageUnavailable(_unreachable("pull", wanted, reference, exc.message)) from exc
    except requests.exceptions.ConnectionError as exc:
        raise EngineUnavailable(
            f"the Docker engine is not usable ({exc}): {_START_DOCKER}"
        ) from exc
    progress(f"pulled {wanted}")


def push_target(text: str, name: str, tag: str) -> ImageReference:
    """Where `airlock image push TEXT` sends an image called `name:tag` here: TEXT is a
    registry (`host[:port]`, the image keeps its name and tag there) or a repository on one
    (`host[:port]/path[:tag]`). The registry must be written out, so that nothing goes to
    Docker Hub by accident; a digest is the registry's to give, not ours."""
    if "/" not in text:
        if not is_domain(text):
            raise ImageUnavailable(
                f"{text!r} is not a registry address: write host[:port], such as "
                "127.0.0.1:5000 or registry.example.com, or host[:port]/repository"
            )
        return ImageReference(domain=text, path=name, tag=tag)
    try:
        target = parse_reference(text)
    except ValueError as exc:
        raise ImageUnavailable(str(exc)) from None
    if not target.domain:
        raise ImageUnavailable(
            f"{text!r} names no registry: write the registry first, such as "
            f"127.0.0.1:5000/{text} (or docker.io/{text} for Docker Hub)"
        )
    if target.digest:
        raise ImageUnavailable(
            f"{text!r} has a digest: push to a repository or tag (the registry gives the "
            "digest, and `airlock image push` prints it)"
        )
    return ImageReference(domain=target.domain, path=target.path, tag=target.tag or tag)


def push(
    client: docker.DockerClient, local: str, target: ImageReference, progress: Progress
) -> str:
    """Tag the local image `local` as `target` and push it; return `repository@sha256:...`.
    A push that fails takes back the name it added, so nothing half-published stays."""
    progress(f"pushing {local} to {target.registry} as {target.pinned}")
    try:
        added = _add_name(client, local, target)
    except docker.errors.APIError as exc:
        raise ImageUnavailable(f"cannot name {local} {target.pinned}: {_explanation(exc)}") from exc
    try:
        digest = _send(client, target, progress)
    except BaseException:
        if added:
            client.api.remove_image(target.pinned)
        raise
    return f"{target.repository}@{digest}"


def _add_name(client: docker.DockerClient, local: str, target: ImageReference) -> bool:
    """Give `local` the name `target`; whether the name is new (it was not there before)."""
    try:
        client.images.get(target.pinned)
        existed = True
    except docker.errors.ImageNotFound:
        existed = False
    client.api.tag(local, target.repository, target.tag)
    return not existed


def _send(client: docker.DockerClient, target: ImageReference, progress: Progress) -> str:
    try:
        events = client.api.push(target.repository, tag=target.tag, stream=True, decode=True)
        digest = _follow(events, progress)
    except docker.errors.APIError as exc:
        raise ImageUnavailable(_unreachable("push", target.pinned, target, exc)) from exc
    except _TransferFailed as exc:
        raise ImageUnavailable(_unreachable("push", target.pinned, target, exc.message)) from exc
    except requests.exceptions.ConnectionError as exc:
        raise EngineUnavailable(
            f"the Docker engine is not usable ({exc}): {_START_DOCKER}"
        ) from exc
    if not digest:
        raise ImageUnavailable(
            f"the push of {target.pinned} ended without the registry's digest; push again"
        )
    return digest


class _TransferFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _follow(events: Iterable[Mapping[str, Any]], progress: Progress) -> str:
    """Report a pull's or push's events; the digest a push's last event carries, if any."""
    digest = ""
    for event in events:
        if "error" in event:
            detail = event.get("errorDetail") or {}
            raise _TransferFailed(str(detail.get("message") or event["error"]))
        aux = event.get("aux")
        if isinstance(aux, Mapping) and isinstance(aux.get("Digest"), str):
            digest = aux["Digest"]
        status = str(event.get("status", ""))
        if status and status not in _TICKING:
            layer = event.get("id")
            progress(f"{layer}: {status}" if layer else status)
    return digest


def _explanation(exc: docker.errors.APIError | str) -> str:
    if isinstance(exc, str):
        return exc
    return str(exc.explanation or exc)


def _not_held(wanted: str, reference: ImageReference, exc: docker.errors.APIError | str) -> str:
    return (
        f"the registry {reference.registry} has no image {wanted} ({_explanation(exc)}): "
        "push it there with `airlock image push`, or correct the reference to the one "
        "that command printed"
    )


def _unreachable(
    action: str, wanted: str, reference: ImageReference, exc: docker.errors.APIError | str
) -> str:
    return (
        f"cannot {action} {wanted} ({_explanation(exc)}): check that the registry "
        f"{reference.registry} is running and that this machine's Docker engine reaches it "
        "(a registry outside 127.0.0.0/8 without TLS must be listed under insecure-registries "
        "in /etc/docker/daemon.json), then retry"
    )
