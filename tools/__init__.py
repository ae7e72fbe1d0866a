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
)
from .run_code import run_code

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
    "fetch_artifact",
    "iso_time",
    "read_artifact_resource",
    "request_capability",
    "revoke_capability",
    "run_code",
    "teardown_session",
    "tool_errors",
]
