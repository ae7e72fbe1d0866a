"""Sandboxes: backends that run one job per fresh container, the runner, the hatch, images.

Tools hand a backend a platform-neutral `JobSpec` and get a `JobOutcome`; nothing
above this room talks to Docker.
"""

from .backend import Backend
from .docker import DockerBackend, connect
from .hatch import RESERVED_PREFIX, safe_relative_path
from .spec import (
    ArtifactCaps,
    ContainerLimits,
    InputFile,
    JobOutcome,
    JobSpec,
    OutputFile,
    StreamCapture,
    Usage,
    WorkspaceEntry,
)

__all__ = [
    "RESERVED_PREFIX",
    "ArtifactCaps",
    "Backend",
    "ContainerLimits",
    "DockerBackend",
    "InputFile",
    "JobOutcome",
    "JobSpec",
    "OutputFile",
    "StreamCapture",
    "Usage",
    "WorkspaceEntry",
    "connect",
    "safe_relative_path",
]
