"""Airlock's records: a database (SQLite under the data dir by default, or PostgreSQL
for a fleet: one schema, SQLAlchemy Core and Alembic migrations; `docs/store.md`) for
sessions, runs, artifacts, versioned session workspaces and the audit, a content-addressed
blob store for their bytes (files, or PostgreSQL for a fleet), and the one way a directory
of the data dir is made (0700). By backend: the local files are the modules here
(`blobs`, `blob_contents`, `documents`), the PostgreSQL ones `postgres/`; the records, on
either database, are `database/` (one module per family of records) over `queries/`. The
fleet's coordination (which server owns the runs still going and whether it lives, the
notices between servers, the fencing of a lost claim's runs) is `fleet/`.

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
    from .database import SCHEMA_REVISION, SCHEMA_VERSION, Database
    from .fleet.claims import (
        FileClaim,
        InstanceClaim,
        InstanceLock,
        claim_instance,
        end_runs_of_dead_instances,
    )
    from .fleet.notices import (
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
        "database": ("SCHEMA_REVISION", "SCHEMA_VERSION", "Database"),
        "fleet.claims": (
            "FileClaim",
            "InstanceClaim",
            "InstanceLock",
            "claim_instance",
            "end_runs_of_dead_instances",
        ),
        "fleet.notices": (
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
