"""Sandboxes: backends that run one job per fresh container, the runner, the hatch, images.

Tools hand a backend a platform-neutral `JobSpec` and get a `JobOutcome`; nothing
above this room talks to Docker.
"""

from .backend import Backend, Ready, Sandbox
from .docker import EXCHANGE_GRACE_S, DockerBackend, connect
from .hatch import RESERVED_PREFIX, safe_relative_path
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
