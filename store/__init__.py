"""Airlock's records: a database (SQLite under the data dir by default, or PostgreSQL
for a fleet: one schema, SQLAlchemy Core and Alembic migrations; `docs/store.md`) for
sessions, runs, artifacts, versioned session workspaces and the audit, a content-addressed
blob store for their bytes (files, or PostgreSQL for a fleet), which server instance owns
the runs still going, the fleet's notices (`notices`: in-process, or LISTEN/NOTIFY in
`pg_notices`), and the one way a directory of the data dir is made (0700).

May import only the base modules (`airlock.errors`, `airlock.languages`, ...): no room,
not even policies (pyproject's `rooms` import contract, checked by `lint-imports`).

Failures of the database driver or the filesystem come out as `StoreError` (never with a
URL's password); a record that is not there is `None` (or an empty list), never
`NotFound`: deciding what the caller may see is for the layers above.

The names below are imported on first use (`airlock.lazy`), so the vault's `private_dir`
does not load SQLAlchemy and pydantic.
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from typing import TYPE_CHECKING

from airlock.lazy import homes, resolve

if TYPE_CHECKING:
    from .blobs import BlobStore, Draft, DraftWriter, Staging
    from .db import SCHEMA_REVISION, SCHEMA_VERSION, Database
    from .instances import (
        FileClaim,
        InstanceClaim,
        InstanceLock,
        claim_instance,
        end_runs_of_dead_instances,
    )
    from .notices import (
        AnyNotice,
        ApprovalDecided,
        GrantRevoked,
        Notices,
        Sampled,
        SessionEnded,
        TaskCancelRequested,
        revocations,
    )
    from .private import create_private_file, private_dir, private_file_problem
    from .records import (
        PROXY_CHALLENGE,
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
        KeptBrowserRecord,
        KeptBrowserStep,
        PatchRecord,
        ReplicaRecord,
        RunRecord,
        RunStatus,
        SessionRecord,
        TaskRecord,
        TaskStatus,
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
        "db": ("SCHEMA_REVISION", "SCHEMA_VERSION", "Database"),
        "instances": (
            "FileClaim",
            "InstanceClaim",
            "InstanceLock",
            "claim_instance",
            "end_runs_of_dead_instances",
        ),
        "notices": (
            "AnyNotice",
            "ApprovalDecided",
            "GrantRevoked",
            "Notices",
            "Sampled",
            "SessionEnded",
            "TaskCancelRequested",
            "revocations",
        ),
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
            "KeptBrowserRecord",
            "KeptBrowserStep",
            "PatchRecord",
            "PROXY_CHALLENGE",
            "ReplicaRecord",
            "RunRecord",
            "RunStatus",
            "SessionRecord",
            "TaskRecord",
            "TaskStatus",
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
    "PROXY_CHALLENGE",
    "SCHEMA_REVISION",
    "SCHEMA_VERSION",
    "AnyNotice",
    "ApprovalDecided",
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
    "FileClaim",
    "GrantRecord",
    "GrantRevoked",
    "HatchCopyRecord",
    "InstanceClaim",
    "InstanceLock",
    "KeptBrowserRecord",
    "KeptBrowserStep",
    "Notices",
    "PatchRecord",
    "ReplicaRecord",
    "RunRecord",
    "RunStatus",
    "Sampled",
    "SessionEnded",
    "SessionRecord",
    "Staging",
    "TaskCancelRequested",
    "TaskRecord",
    "TaskStatus",
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
    "revocations",
]


def __getattr__(name: str) -> object:
    return resolve(__name__, _HOMES, name)
