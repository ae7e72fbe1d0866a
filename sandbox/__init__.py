"""Sandboxes: backends that run one job per fresh container, the runner, the hatch, images.

Tools hand a backend a platform-neutral `JobSpec` and get a `JobOutcome`. This is the
only room that imports docker: the rooms above hold the engine client `connect` returns
(`docker.EngineClient`) as a handle, pass it back into this room and close it.

May import egress (the names of its socket), broker, policies, store and the base
modules, never tools or server, and not the MCP SDK (pyproject's import contracts,
checked by `lint-imports`).

The code that runs inside the containers (the entrypoint, the runner, the code's process)
is the subpackage `inside`: standard library only, copied into the image byte for byte.
The rest of this room imports only its `wire` module (tests/rooms/inside/test_inside.py checks
both).

The names below are imported on first use (`airlock.lazy`), so a module of this room
that needs no engine (`gitdiff`, `patch_apply` for `airlock patch`) loads without docker.
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from typing import TYPE_CHECKING

from airlock.lazy import homes, resolve

if TYPE_CHECKING:
    from .backend import EXCHANGE_GRACE_S, Backend, Ready, Sandbox
    from .docker import DockerBackend, connect
    from .file_transfer import RESERVED_PREFIX, safe_relative_path
    from .spec import (
        ArtifactCaps,
        ContainerLimits,
        EgressMount,
        InputDir,
        InputFile,
        JobOutcome,
        JobSpec,
        OutputFile,
        StreamCapture,
        Usage,
        WorkspaceEntry,
        limits_of,
    )

_HOMES = homes(
    {
        "backend": ("EXCHANGE_GRACE_S", "Backend", "Ready", "Sandbox"),
        "docker": ("DockerBackend", "connect"),
        "file_transfer": ("RESERVED_PREFIX", "safe_relative_path"),
        "spec": (
            "ArtifactCaps",
            "ContainerLimits",
            "EgressMount",
            "InputDir",
            "InputFile",
            "JobOutcome",
            "JobSpec",
            "OutputFile",
            "StreamCapture",
            "Usage",
            "WorkspaceEntry",
            "limits_of",
        ),
    }
)

__all__ = [
    "EXCHANGE_GRACE_S",
    "RESERVED_PREFIX",
    "ArtifactCaps",
    "Backend",
    "ContainerLimits",
    "DockerBackend",
    "EgressMount",
    "InputDir",
    "InputFile",
    "JobOutcome",
    "JobSpec",
    "OutputFile",
    "Ready",
    "Sandbox",
    "StreamCapture",
    "Usage",
    "WorkspaceEntry",
    "connect",
    "limits_of",
    "safe_relative_path",
]


def __getattr__(name: str) -> object:
    return resolve(__name__, _HOMES, name)
