"""Tool handlers: transport-neutral functions the server registers as MCP tools.

Each takes the `Services` and the caller's resolved `Session`; the server owns
transports, sessions and registration.

May import sandbox, egress, broker, policies, store and the base modules, never server;
it builds MCP results from the protocol's data types (`mcp_types`, pydantic only) but imports
no transport: neither the MCP SDK (`mcp`), docker nor an HTTP server
(pyproject's import contracts, checked by `lint-imports`).

The names below are imported on first use (`airlock.lazy`), so the operator's commands
that read records (`airlock audit`, `patch`, `approvals`) reach `tools.context` or
`tools.envelope` without loading the MCP SDK, Docker or the egress proxy. `run_code` and
`browse` are imported from their modules (`tools.run_code`, `tools.browse`): a lazy name
cannot be its module's name, which the import system binds on the package to the module
once anyone imports it.
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from typing import TYPE_CHECKING

from airlock.lazy import homes, resolve

if TYPE_CHECKING:
    from .artifacts import fetch_artifact, read_artifact_resource, resource_label
    from .capabilities import Approval, request_capability, revoke_capability
    from .context import Services, Session, iso_time
    from .errors import tool_error_text
    from .hatch import copy_in, get_patch, read_patch_resource
    from .models import (
        CapabilityResult,
        CopyResult,
        EndSessionResult,
        FetchResult,
        FileArg,
        ForkResult,
        PatchResult,
        RestoreResult,
        RevokeResult,
        RunResult,
        WorkspaceFileResult,
        WorkspaceListing,
    )
    from .session_end import STOPS, Stop, stop_session
    from .workspace import (
        list_workspace,
        read_workspace_file,
        read_workspace_resource,
        restore_workspace,
    )

_HOMES = homes(
    {
        "artifacts": ("fetch_artifact", "read_artifact_resource", "resource_label"),
        "capabilities": ("Approval", "request_capability", "revoke_capability"),
        "context": ("Services", "Session", "iso_time"),
        "errors": ("tool_error_text",),
        "hatch": ("copy_in", "get_patch", "read_patch_resource"),
        "models": (
            "CapabilityResult",
            "CopyResult",
            "EndSessionResult",
            "FetchResult",
            "FileArg",
            "ForkResult",
            "PatchResult",
            "RestoreResult",
            "RevokeResult",
            "RunResult",
            "WorkspaceFileResult",
            "WorkspaceListing",
        ),
        "session_end": ("STOPS", "Stop", "stop_session"),
        "workspace": (
            "list_workspace",
            "read_workspace_file",
            "read_workspace_resource",
            "restore_workspace",
        ),
    }
)

__all__ = [
    "STOPS",
    "Approval",
    "CapabilityResult",
    "CopyResult",
    "EndSessionResult",
    "FetchResult",
    "FileArg",
    "ForkResult",
    "PatchResult",
    "RestoreResult",
    "RevokeResult",
    "RunResult",
    "Services",
    "Session",
    "Stop",
    "WorkspaceFileResult",
    "WorkspaceListing",
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
    "restore_workspace",
    "revoke_capability",
    "stop_session",
    "tool_error_text",
]


def __getattr__(name: str) -> object:
    return resolve(__name__, _HOMES, name)
