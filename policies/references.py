"""Container image references (`registry.example:5000/team/airlock-sandbox:1@sha256:...`):
their grammar and parts.

Pure functions shared by the policy model (which validates `[sandbox] image` and `[image]
base` as an operator writes them) and the sandbox room (which pulls and pushes by them), so
both read a reference the same way. The grammar is the one Docker and the distribution
project use (`distribution/reference`): `[domain[:port]/]path[:tag][@sha256:hex]`, where the
first component is a domain only when it has a `.` or a `:`, or is `localhost`; a path is
lower case. Nothing here talks to an engine or a registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOMAIN = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]{1,5})?"
)
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
_MAX_NAME = 255
EXAMPLE = "registry.example:5000/team/airlock-sandbox@sha256:<64 hex digits>"


@dataclass(frozen=True)
class ImageReference:
    """One parsed reference; `domain` is empty when the reference names none (Docker Hub)."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def repository(self) -> str:
        return f"{self.domain}/{self.path}" if self.domain else self.path

    @property
    def pinned(self) -> str:
        """What the engine is asked for: by digest when there is one (a tag next to a digest
        says nothing more), else by tag (`latest` when none is written)."""
        if self.digest:
            return f"{self.repository}@{self.digest}"
        return f"{self.repository}:{self.tag or 'latest'}"

    @property
    def registry(self) -> str:
        return self.domain or "docker.io"


def is_domain(component: str) -> bool:
    """Whether a reference's first component names a registry rather than a path."""
    return ("." in component or ":" in component or component == "localhost") and bool(
        _DOMAIN.fullmatch(component)
    )


def parse_reference(text: str) -> ImageReference:
    """Parse an image reference; ValueError with a sentence saying what to write instead."""
    name, _, digest = text.partition("@")
    if digest and not _DIGEST.fullmatch(digest):
        raise ValueError(
            f"{text!r} has a malformed digest {digest!r}: write sha256: and 64 lower-case hex "
            f"digits, as `airlock image push` prints it (such as {EXAMPLE})"
        )
    components = name.split("/")
    domain = components[0] if len(components) > 1 and is_domain(components[0]) else ""
    if domain:
        components = components[1:]
    tag = ""
    if ":" in components[-1]:
        components[-1], _, tag = components[-1].partition(":")
        if not _TAG.fullmatch(tag):
            raise ValueError(
                f"{text!r} has a malformed tag {tag!r}: a tag is 1-128 letters, digits, "
                "'_', '.' and '-', not starting with '.' or '-'"
            )
    path = "/".join(components)
    if not all(_PATH_COMPONENT.fullmatch(part) for part in components) or len(name) > _MAX_NAME:
        raise ValueError(
            f"{text!r} is not an image reference: write [registry[:port]/]name[:tag]"
            f"[@sha256:digest] with a lower-case name, such as {EXAMPLE}"
        )
    return ImageReference(domain=domain, path=path, tag=tag, digest=digest)
