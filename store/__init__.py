"""Airlock's records: SQLite (WAL) for sessions, runs, artifacts and versioned session
workspaces, a content-addressed blob store for their bytes, which server instance owns
the runs still going, and the one way a directory of the data dir is made (0700).

May import only the base modules (`airlock.errors`, `airlock.languages`, ...): no room,
not even policies (pyproject's `rooms` import contract, checked by `lint-imports`).

Failures of sqlite3 or the filesystem come out as `StoreError`; a record that is not there
is `None` (or an empty list), never `NotFound`: deciding what the caller may see is for the
layers above.

The names below are imported on first use (`airlock.lazy`), so the vault's `private_dir`
does not load SQLite and pydantic.
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from typing import TYPE_CHECKING

from airlock.lazy import homes, resolve

if TYPE_CHECKING:
    from .blobs import BlobStore, Draft, DraftWriter, Staging
    from .db import SCHEMA_VERSION, Database
    from .instances import InstanceLock, claim_instance, end_runs_of_dead_instances
    from .private import create_private_file, private_dir, private_file_problem
    from .records import (
        ApprovalRecord,
        ApprovalStatus,
        ArtifactRecord,
        DrillRecord,
        EgressCount,
        EgressRecord,
        EgressSummary,
        EgressVerdict,
        GrantRecord,
        HatchCopyRecord,
        PatchRecord,
        RunRecord,
        RunStatus,
        SessionRecord,
        WorkspaceFile,
    )
    from .workspace import (
        WorkspaceCommit,
        WorkspaceConflict,
        WorkspaceDelta,
        WorkspaceHead,
        ancestors,
        diff,
    )

_HOMES = homes(
    {
        "blobs": ("BlobStore", "Draft", "DraftWriter", "Staging"),
        "db": ("SCHEMA_VERSION", "Database"),
        "instances": ("InstanceLock", "claim_instance", "end_runs_of_dead_instances"),
        "private": ("create_private_file", "private_dir", "private_file_problem"),
        "records": (
            "ApprovalRecord",
            "ApprovalStatus",
            "ArtifactRecord",
            "DrillRecord",
            "EgressCount",
            "EgressRecord",
            "EgressSummary",
            "EgressVerdict",
            "GrantRecord",
            "HatchCopyRecord",
            "PatchRecord",
            "RunRecord",
            "RunStatus",
            "SessionRecord",
            "WorkspaceFile",
        ),
        "workspace": (
            "WorkspaceCommit",
            "WorkspaceConflict",
            "WorkspaceDelta",
            "WorkspaceHead",
            "ancestors",
            "diff",
        ),
    }
)

__all__ = [
    "SCHEMA_VERSION",
    "ApprovalRecord",
    "ApprovalStatus",
    "ArtifactRecord",
    "BlobStore",
    "Database",
    "Draft",
    "DraftWriter",
    "DrillRecord",
    "EgressCount",
    "EgressRecord",
    "EgressSummary",
    "EgressVerdict",
    "GrantRecord",
    "HatchCopyRecord",
    "InstanceLock",
    "PatchRecord",
    "RunRecord",
    "RunStatus",
    "SessionRecord",
    "Staging",
    "WorkspaceCommit",
    "WorkspaceConflict",
    "WorkspaceDelta",
    "WorkspaceFile",
    "WorkspaceHead",
    "ancestors",
    "claim_instance",
    "create_private_file",
    "diff",
    "end_runs_of_dead_instances",
    "private_dir",
    "private_file_problem",
]


def __getattr__(name: str) -> object:
    return resolve(__name__, _HOMES, name)
