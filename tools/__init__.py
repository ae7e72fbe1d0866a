"""Tool handlers: transport-neutral functions the server registers as MCP tools.

Each takes the `Services` and the caller's resolved `Session`; the server owns
transports, sessions and registration.
"""

from .artifacts import fetch_artifact, read_artifact_resource
from .capabilities import Approval, request_capability, revoke_capability
from .context import Services, Session, iso_time
from .end_session import teardown_session
from .errors import tool_errors
from .models import (
    CapabilityResult,
    EndSessionResult,
    FetchResult,
    FileArg,
    RevokeResult,
    RunResult,
    WorkspaceFileResult,
    WorkspaceListing,
)
from .run_code import run_code
from .workspace import list_workspace, read_workspace_file, read_workspace_resource

__all__ = [
    "Approval",
    "CapabilityResult",
    "EndSessionResult",
    "FetchResult",
    "FileArg",
    "RevokeResult",
    "RunResult",
    "Services",
    "Session",
    "WorkspaceFileResult",
    "WorkspaceListing",
    "fetch_artifact",
    "iso_time",
    "list_workspace",
    "read_artifact_resource",
    "read_workspace_file",
    "read_workspace_resource",
    "request_capability",
    "revoke_capability",
    "run_code",
    "teardown_session",
    "tool_errors",
]
