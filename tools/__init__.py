"""Tool handlers: transport-neutral functions the server registers as MCP tools.

Each takes the `Services` and the caller's resolved `Session`; the server owns
transports, sessions and registration.

May import sandbox, egress, broker, policies, store and the base modules, never server;
it builds MCP results (`mcp.types`) but imports neither docker nor an HTTP server
(pyproject's import contracts, checked by `lint-imports`).
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from .artifacts import fetch_artifact, read_artifact_resource, resource_label
from .browse import browse
from .capabilities import Approval, request_capability, revoke_capability
from .context import Services, Session, iso_time
from .end_session import teardown_session
from .errors import tool_errors
from .hatch import copy_in, get_patch, read_patch_resource
from .models import (
    CapabilityResult,
    CopyResult,
    EndSessionResult,
    FetchResult,
    FileArg,
    PatchResult,
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
    "CopyResult",
    "EndSessionResult",
    "FetchResult",
    "FileArg",
    "PatchResult",
    "RevokeResult",
    "RunResult",
    "Services",
    "Session",
    "WorkspaceFileResult",
    "WorkspaceListing",
    "browse",
    "copy_in",
    "fetch_artifact",
    "get_patch",
    "iso_time",
    "list_workspace",
    "read_artifact_resource",
    "read_patch_resource",
    "read_workspace_file",
    "read_workspace_resource",
    "request_capability",
    "resource_label",
    "revoke_capability",
    "run_code",
    "teardown_session",
    "tool_errors",
]
