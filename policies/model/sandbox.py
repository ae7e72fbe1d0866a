"""Where boxes come from: the image and runtime sandboxes start from ([sandbox]), what the
image Airlock builds holds beyond its defaults ([image]), and the warm pool of started
containers ([pool]). Not here: building or checking images (`sandbox/image.py`)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator

from airlock.policies.references import parse_reference

from .section import Section, as_tuple, problem, quoted

_DEBIAN_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}")


def _reference(value: str | None) -> str | None:
    if value is not None:
        try:
            parse_reference(value)
        except ValueError as exc:
            raise problem("image_reference", str(exc)) from None
    return value


class SandboxSettings(Section):
    """Which image sandboxes start from and which container runtime runs them."""

    image: str | None = Field(default=None, min_length=1)
    """Image reference for sandboxes, such as the "registry:5000/airlock-sandbox@sha256:..."
    that `airlock image push` prints: the server pulls it (by digest when it has one) when
    the engine lacks it, and refuses an image whose in-container runner is not this
    Airlock's. Missing means the image Airlock builds itself; an empty string is rejected."""

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str | None) -> str | None:
        return _reference(value)

    runtime: Literal["auto", "runc", "runsc"] = "auto"
    """OCI runtime. "auto" (missing means this): gVisor ("runsc") when the Docker engine
    has it registered, else runc with a warning. "runsc" insists on gVisor (a run fails
    with the fix when it is not registered); "runc" opts out of gVisor."""


class ImageSettings(Section):
    """What the image Airlock builds holds beyond its defaults. Ignored when [sandbox]
    image names another image."""

    python_lock: str | None = None
    """Absolute path of a Python lock file that replaces the default one (numpy, pandas,
    matplotlib, scipy, ...); `airlock image lock REQUIREMENTS` writes one. Every entry is
    name==version with a --hash=sha256; the build refuses anything else. Missing means the
    default lock."""

    debian_packages: Annotated[tuple[str, ...], BeforeValidator(as_tuple)] = ()
    """Debian bookworm packages added to the image, such as ["ffmpeg", "graphviz"]. Missing
    or empty: only the default tools. With `base`, the base must hold them (the build checks)."""

    base: str | None = Field(default=None, min_length=1)
    """Image reference of the Debian base the image is built on, such as the
    "registry:5000/airlock-base@sha256:..." that `airlock image push --base` prints: pulled
    when the engine lacks it, so the build needs neither root nor debootstrap. Missing means
    a base bootstrapped here with debootstrap (as root, once)."""

    @field_validator("base")
    @classmethod
    def _base_reference(cls, value: str | None) -> str | None:
        return _reference(value)

    @field_validator("python_lock")
    @classmethod
    def _lock_path_absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise problem(
                "lock_path_relative",
                f"python_lock {quoted(value)} is relative; write the absolute path of the lock "
                "file",
            )
        return value

    @field_validator("debian_packages")
    @classmethod
    def _package_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _DEBIAN_PACKAGE.fullmatch(name):
                raise problem(
                    "debian_package",
                    f"{quoted(name)} is not a Debian package name: lower-case letters, digits "
                    'and + - . only, such as "graphviz"',
                )
        return names


class PoolSettings(Section):
    """The warm pool of started, never-used containers (used once the pool exists)."""

    size: int = Field(default=4, ge=0, le=64)
    """Started, never-used containers kept ready per kind of container (image, runtime,
    limits, with or without egress); missing means 4, 0 disables the pool; at most 64."""
