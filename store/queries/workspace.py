"""Session workspaces (head, versions, the commit that merges) and the hatch's copies and
patches.

A commit reads the head, merges and writes in one transaction. Two commits of one
session must not both read the same head: on SQLite the write lock (BEGIN IMMEDIATE)
already orders them; on PostgreSQL the commit first locks the session's row
(`SELECT … FOR UPDATE`), so a second server's commit of that session waits, then reads
the head the first one wrote. Commits of different sessions do not wait for each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select

from airlock.errors import InvalidRequest, StoreError

from ..records import HatchCopyRecord, PatchRecord, SessionRecord, WorkspaceFile
from ..schema import (
    hatch_copies,
    hatch_patches,
    sessions,
    workspace_changes,
    workspace_files,
    workspace_versions,
)
from ..workspace import Change, WorkspaceCommit, WorkspaceDelta, WorkspaceHead, merge
from . import runs as runs_queries
from .rows import from_json_fields, json_fields, matching, record_columns

_ENTRY_COLUMNS = [c for c in workspace_files.c if c.name != "session_id"]
_HEAD_VERSION = select(func.coalesce(func.max(workspace_versions.c.version), 0)).where(
    workspace_versions.c.session_id == bindparam("session_id")
)
_ENTRIES = (
    select(*_ENTRY_COLUMNS)
    .where(workspace_files.c.session_id == bindparam("session_id"))
    .order_by(workspace_files.c.path)
)
_LOCK_SESSION = (
    select(sessions.c.id).where(sessions.c.id == bindparam("session_id")).with_for_update()
)
_CHANGES_SINCE = (
    select(*[c for c in workspace_changes.c if c.name != "session_id"])
    .where(
        workspace_changes.c.session_id == bindparam("session_id"),
        workspace_changes.c.version > bindparam("version"),
    )
    .order_by(workspace_changes.c.version)
)
_CHANGES_UPTO = _CHANGES_SINCE.where(workspace_changes.c.version <= bindparam("upto"))
_INSERT_VERSION = insert(workspace_versions)
# One path per parameter set (executemany), not an expanding IN: that would compile anew
# for every count of paths, on the warm path.
_DELETE_ENTRY = delete(workspace_files).where(
    workspace_files.c.session_id == bindparam("session_id"),
    workspace_files.c.path == bindparam("entry_path"),
)
_INSERT_ENTRY = insert(workspace_files)
_INSERT_CHANGE = insert(workspace_changes)

_INSERT_COPY = insert(hatch_copies)
_GET_COPY = select(*hatch_copies.c).where(hatch_copies.c.id == bindparam("id"))
_PATCH_JSON = ("entries", "held_back", "refused", "ignored")
_PATCH_COLUMNS = record_columns(hatch_patches)
_INSERT_PATCH = insert(hatch_patches)
_GET_PATCH = select(*_PATCH_COLUMNS).where(hatch_patches.c.id == bindparam("id"))
_FIND_PATCH = (
    select(*_PATCH_COLUMNS)
    .where(
        hatch_patches.c.copy_id == bindparam("copy_id"),
        hatch_patches.c.source_sha256 == bindparam("source_sha256"),
    )
    .order_by(hatch_patches.c.created_at, hatch_patches.c.seq)
    .limit(1)
)


def _head_version(conn: Connection, session_id: str) -> int:
    return int(conn.execute(_HEAD_VERSION, {"session_id": session_id}).scalar_one())


def _entries(conn: Connection, session_id: str) -> list[WorkspaceFile]:
    rows = conn.execute(_ENTRIES, {"session_id": session_id}).mappings()
    return [WorkspaceFile.model_validate(dict(row)) for row in rows]


def head(conn: Connection, session_id: str) -> WorkspaceHead:
    # One transaction (one snapshot): the version and the entries belong together.
    return WorkspaceHead(
        version=_head_version(conn, session_id), files=tuple(_entries(conn, session_id))
    )


def _changes_since(
    conn: Connection, session_id: str, version: int, *, upto: int | None = None
) -> dict[str, Change]:
    """The last change of each path committed after `version` (up to `upto`)."""
    params = {"session_id": session_id, "version": version}
    rows = (
        conn.execute(_CHANGES_SINCE, params)
        if upto is None
        else conn.execute(_CHANGES_UPTO, {**params, "upto": upto})
    )
    since: dict[str, Change] = {}
    for row in rows.mappings():
        fields = dict(row)
        deleted = fields.pop("deleted")
        after = None if deleted else WorkspaceFile.model_validate(fields)
        since[row["path"]] = Change(written_by=row["written_by"], after=after)
    return since


def commit(
    conn: Connection, session_id: str, delta: WorkspaceDelta, writer: str | None, at: float
) -> WorkspaceCommit:
    if conn.dialect.name != "sqlite":
        # SQLite's write lock (BEGIN IMMEDIATE) already orders commits, and renders no
        # FOR UPDATE: a statement saved on the warm path.
        conn.execute(_LOCK_SESSION, {"session_id": session_id})
    head_version = _head_version(conn, session_id)
    if not 0 <= delta.base_version <= head_version:
        raise StoreError(
            f"workspace of session {session_id!r} has no version {delta.base_version} "
            f"(head is {head_version})"
        )
    current = {f.path: f for f in _entries(conn, session_id)}
    version = head_version + 1
    # A commit from the head (one run at a time: the warm path) has nothing to merge with.
    since = (
        _changes_since(conn, session_id, delta.base_version)
        if delta.base_version < head_version
        else {}
    )
    merged = merge(current, delta, since, writer=writer, version=version)
    written, deleted = merged.changes(current)
    if written or deleted:
        replaced = [e for e in written if e.path in current]
        _write_version(conn, session_id, delta.base_version, version, writer, at)
        _drop_entries(conn, session_id, [*deleted, *replaced])
        if written:
            conn.execute(
                _INSERT_ENTRY, [{"session_id": session_id, **e.model_dump()} for e in written]
            )
        _record_changes(conn, session_id, version, writer, written, deleted)
    return WorkspaceCommit(
        base_version=delta.base_version,
        version=version if written or deleted else head_version,
        applied=len(written) + len(deleted),
        conflicts=tuple(merged.conflicts),
    )


def _write_version(
    conn: Connection,
    session_id: str,
    base_version: int,
    version: int,
    writer: str | None,
    at: float,
) -> None:
    params = {"session_id": session_id, "version": version, "base_version": base_version}
    conn.execute(_INSERT_VERSION, {**params, "written_by": writer, "created_at": at})


def _drop_entries(conn: Connection, session_id: str, entries: Sequence[WorkspaceFile]) -> None:
    """Delete the entries deleted or replaced (then inserted again: the upsert of both
    databases in one spelling)."""
    if entries:
        gone = [{"session_id": session_id, "entry_path": e.path} for e in entries]
        conn.execute(_DELETE_ENTRY, gone)


def _record_changes(
    conn: Connection,
    session_id: str,
    version: int,
    writer: str | None,
    written: Sequence[WorkspaceFile],
    deleted: Sequence[WorkspaceFile],
) -> None:
    change: dict[str, Any] = {"session_id": session_id, "version": version, "written_by": writer}
    conn.execute(
        _INSERT_CHANGE,
        [
            {**change, "path": e.path, "deleted": 0, "kind": e.kind, "sha256": e.sha256}
            | {"size": e.size, "mode": e.mode, "mtime": e.mtime}
            for e in written
        ]
        + [
            {**change, "path": e.path, "deleted": 1, "kind": e.kind, "sha256": ""}
            | {"size": 0, "mode": 0, "mtime": 0}
            for e in deleted
        ],
    )


def add_copy(conn: Connection, rec: HatchCopyRecord) -> None:
    conn.execute(_INSERT_COPY, rec.model_dump())


def get_copy(conn: Connection, copy_id: str) -> HatchCopyRecord | None:
    row = conn.execute(_GET_COPY, {"id": copy_id}).mappings().first()
    return HatchCopyRecord.model_validate(dict(row)) if row is not None else None


def _patch(row: Any) -> PatchRecord:
    return PatchRecord.model_validate(from_json_fields(row, *_PATCH_JSON))


def add_patch(conn: Connection, rec: PatchRecord) -> None:
    conn.execute(_INSERT_PATCH, json_fields(rec.model_dump(), *_PATCH_JSON))


def get_patch(conn: Connection, patch_id: str) -> PatchRecord | None:
    row = conn.execute(_GET_PATCH, {"id": patch_id}).mappings().first()
    return _patch(row) if row is not None else None


def list_patches(
    conn: Connection, session_id: str | None, limit: int, except_tenant: str | None
) -> list[PatchRecord]:
    chosen = [matching(hatch_patches, {"session_id": session_id})]
    if except_tenant is not None:
        chosen.append(hatch_patches.c.tenant != except_tenant)
    query = (
        select(*_PATCH_COLUMNS)
        .where(*chosen)
        .order_by(hatch_patches.c.created_at.desc(), hatch_patches.c.seq.desc())
        .limit(limit)
    )
    return [_patch(row) for row in conn.execute(query).mappings()]


def find_patch(conn: Connection, copy_id: str, source_sha256: str) -> PatchRecord | None:
    params = {"copy_id": copy_id, "source_sha256": source_sha256}
    row = conn.execute(_FIND_PATCH, params).mappings().first()
    return _patch(row) if row is not None else None


def state_at(conn: Connection, session_id: str, version: int) -> list[WorkspaceFile]:
    """The session's workspace as version `version` left it: the head itself, or each
    path's last change up to that version (every commit records its changes)."""
    head_version = _head_version(conn, session_id)
    if not 0 <= version <= head_version:
        raise InvalidRequest(
            f"session {session_id} has no workspace version {version}; its versions are "
            f"0 to {head_version} (list_workspace shows the current one)"
        )
    if version == head_version:
        return _entries(conn, session_id)
    last: dict[str, WorkspaceFile | None] = {}
    for path, change in _changes_since(conn, session_id, -1, upto=version).items():
        last[path] = change.after
    return sorted((e for e in last.values() if e is not None), key=lambda e: e.path)


def fork(conn: Connection, child: SessionRecord, at: float) -> None:
    """Start `child` (its parent and version set) with the parent's workspace at that
    version: rows naming the same blobs, no content copied. The fork's history starts at
    that version, recorded as written by the parent, whole, so its own versions can be
    read and restored without the parent."""
    assert child.parent_id is not None and child.parent_version is not None
    entries = state_at(conn, child.parent_id, child.parent_version)
    runs_queries.create_session(conn, child)
    if child.parent_version == 0:
        return
    _write_version(conn, child.id, child.parent_version, child.parent_version, child.parent_id, at)
    if entries:
        conn.execute(_INSERT_ENTRY, [{"session_id": child.id, **e.model_dump()} for e in entries])
    _record_changes(conn, child.id, child.parent_version, child.parent_id, entries, [])


def restore(
    conn: Connection, session_id: str, version: int, writer: str, at: float
) -> WorkspaceCommit:
    """A new version of the session's workspace equal to its version `version`; history
    is kept as it was (the restore is one more commit, by `writer`)."""
    first = _first_version(conn, session_id)
    if version < first:
        raise InvalidRequest(
            f"versions before {first} of session {session_id} belong to the session it was "
            "forked from; fork that session at the version instead"
        )
    old = {e.path: e for e in state_at(conn, session_id, version)}
    current = {e.path: e for e in _entries(conn, session_id)}
    upserts = [e for p, e in sorted(old.items()) if current.get(p) != e]
    delta = WorkspaceDelta(
        base_version=_head_version(conn, session_id),
        upserts=tuple(upserts),
        deletes=tuple(p for p in sorted(current) if p not in old),
        dirs=tuple(e for _, e in sorted(old.items()) if e.kind == "dir"),
    )
    return commit(conn, session_id, delta, writer, at)


def _first_version(conn: Connection, session_id: str) -> int:
    """The first version of this session's own history: its fork point, else 0."""
    parent_version = conn.execute(
        select(sessions.c.parent_version).where(sessions.c.id == session_id)
    ).scalar_one_or_none()
    return int(parent_version or 0)


def versions(conn: Connection, session_id: str) -> list[tuple[int, int, str | None, float]]:
    """(version, base version, writer, time) of each committed version, oldest first."""
    v = workspace_versions.c
    query = (
        select(v.version, v.base_version, v.written_by, v.created_at)
        .where(v.session_id == session_id)
        .order_by(v.version)
    )
    return [(int(a), int(b), w, float(t)) for a, b, w, t in conn.execute(query)]
