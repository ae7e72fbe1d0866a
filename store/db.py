"""The SQLite database: sessions, runs, artifact metadata and session workspaces.

Owns the schema, the one connection and the SQL. Blob contents live in `blobs.py`; who may
see which row (tenants, sessions) is decided by the callers, which filter by the ids they
pass. sqlite3 and OSError failures leave this module as `StoreError`; a missing row is
`None` or an empty list, never an exception.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, get_args

import anyio.to_thread

from airlock.errors import StoreError

from .private import private_dir
from .records import (
    ApprovalRecord,
    ArtifactRecord,
    DrillRecord,
    EgressCount,
    EgressRecord,
    GrantRecord,
    HatchCopyRecord,
    PatchRecord,
    RunRecord,
    RunStatus,
    SessionRecord,
    WorkspaceFile,
)
from .workspace import Change, WorkspaceCommit, WorkspaceDelta, WorkspaceHead, merge

_T = TypeVar("_T")

SCHEMA_VERSION = 4
"""1: the first schema. 2: workspace entries keep kind, mode, mtime, writer and version;
workspace versions and their changes are recorded (columns and tables added on open).
3: runs record their container runtime. 4: runs record the server instance that owns them
(older runs read as owned by none)."""

# A second process (e.g. `airlock gc`) may hold the write lock briefly; wait rather than fail.
_BUSY_TIMEOUT_MS = 5000

_STATUSES = ", ".join(f"'{s}'" for s in get_args(RunStatus))

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        ended_at REAL,
        end_reason TEXT,
        containers_removed INTEGER NOT NULL DEFAULT 0
    )""",
    f"""CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        tenant TEXT NOT NULL,
        language TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ({_STATUSES})),
        created_at REAL NOT NULL,
        timeout_s INTEGER NOT NULL,
        limits_json TEXT NOT NULL,
        code_sha256 TEXT NOT NULL,
        finished_at REAL,
        duration_ms INTEGER,
        exit_code INTEGER,
        cpu_seconds REAL,
        peak_memory_bytes INTEGER,
        stdout_bytes INTEGER NOT NULL DEFAULT 0,
        stdout_sha256 TEXT,
        stderr_bytes INTEGER NOT NULL DEFAULT 0,
        stderr_sha256 TEXT,
        error TEXT,
        runtime TEXT NOT NULL DEFAULT '',
        instance_id TEXT NOT NULL DEFAULT ''
    )""",
    # created_at trails the filter column so "newest first" of one session or tenant is
    # read straight off the index.
    "CREATE INDEX IF NOT EXISTS runs_by_session ON runs (session_id, created_at)",
    "CREATE INDEX IF NOT EXISTS runs_by_tenant ON runs (tenant, created_at)",
    # The primary key (run_id, path) is also the index for lookups by run_id.
    """CREATE TABLE IF NOT EXISTS artifacts (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        tenant TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (run_id, path)
    )""",
    """CREATE TABLE IF NOT EXISTS workspace_files (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (session_id, path)
    )""",
    """CREATE TABLE IF NOT EXISTS egress_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        time REAL NOT NULL,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        capability TEXT,
        method TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        path TEXT NOT NULL,
        status INTEGER NOT NULL,
        bytes_in INTEGER NOT NULL,
        bytes_out INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        decision TEXT NOT NULL,
        reason TEXT NOT NULL,
        resolved_ip TEXT,
        injected_json TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS egress_by_run ON egress_log (run_id, seq)",
    "CREATE INDEX IF NOT EXISTS egress_by_session ON egress_log (session_id, seq)",
    """CREATE TABLE IF NOT EXISTS grants (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        capability TEXT NOT NULL,
        params_json TEXT NOT NULL,
        scope_json TEXT NOT NULL,
        approved_by TEXT NOT NULL,
        reason TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        revoked_at REAL
    )""",
    "CREATE INDEX IF NOT EXISTS grants_by_tenant ON grants (tenant, created_at)",
    # Capability requests waiting for the operator (shared by the server and the CLI).
    """CREATE TABLE IF NOT EXISTS approvals (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        capability TEXT NOT NULL,
        params_json TEXT NOT NULL,
        ttl_s INTEGER NOT NULL,
        reason TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'used')),
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        decided_at REAL,
        decided_by TEXT,
        grant_id TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS approvals_by_status ON approvals (status, created_at)",
    # Each `airlock drill`: when, against which policy, what held (rows as JSON).
    """CREATE TABLE IF NOT EXISTS drills (
        id TEXT PRIMARY KEY,
        target TEXT NOT NULL,
        tenant TEXT NOT NULL,
        started_at REAL NOT NULL,
        finished_at REAL NOT NULL,
        held INTEGER NOT NULL,
        failed INTEGER NOT NULL,
        not_applicable INTEGER NOT NULL,
        sessions_json TEXT NOT NULL,
        rows_json TEXT NOT NULL
    )""",
    # What each run started from (the session workspace plus the call's files), for the
    # audit; contents are blobs. A table of its own so older databases simply gain it.
    """CREATE TABLE IF NOT EXISTS run_inputs (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (run_id, path)
    )""",
    # One row per committed workspace version; version 0 (the empty start) has none.
    """CREATE TABLE IF NOT EXISTS workspace_versions (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        base_version INTEGER NOT NULL,
        written_by TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, version)
    )""",
    # What each version changed, path by path: the state after, or deleted = 1.
    """CREATE TABLE IF NOT EXISTS workspace_changes (
        session_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        path TEXT NOT NULL,
        deleted INTEGER NOT NULL,
        kind TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        mode INTEGER NOT NULL,
        mtime INTEGER NOT NULL,
        written_by TEXT,
        PRIMARY KEY (session_id, version, path),
        FOREIGN KEY (session_id, version)
            REFERENCES workspace_versions (session_id, version) ON DELETE CASCADE
    )""",
    """CREATE TABLE IF NOT EXISTS hatch_copies (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        root TEXT NOT NULL,
        root_path TEXT NOT NULL,
        dest TEXT NOT NULL,
        baseline_sha256 TEXT NOT NULL,
        files INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        version INTEGER NOT NULL,
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS hatch_patches (
        id TEXT PRIMARY KEY,
        copy_id TEXT NOT NULL REFERENCES hatch_copies (id),
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        version INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        entries_json TEXT NOT NULL,
        held_back_json TEXT NOT NULL,
        refused_json TEXT NOT NULL,
        ignored_json TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS patches_by_copy ON hatch_patches (copy_id, sha256)",
)

# Columns added to tables of schema 1: each is added on open when it is missing, so a
# database written by an older Airlock opens with its rows intact and the defaults filled in.
_ADDED_COLUMNS = (
    ("workspace_files", "kind", "TEXT NOT NULL DEFAULT 'file' CHECK (kind IN ('file', 'dir'))"),
    ("workspace_files", "mode", "INTEGER NOT NULL DEFAULT 420"),
    ("workspace_files", "mtime", "INTEGER NOT NULL DEFAULT 0"),
    ("workspace_files", "written_by", "TEXT"),
    ("workspace_files", "version", "INTEGER NOT NULL DEFAULT 0"),
    ("runs", "runtime", "TEXT NOT NULL DEFAULT ''"),
    ("runs", "instance_id", "TEXT NOT NULL DEFAULT ''"),
    ("hatch_patches", "source_sha256", "TEXT NOT NULL DEFAULT ''"),
)

_SESSION_COLUMNS = (
    "id, tenant, created_at, last_used_at, expires_at, ended_at, end_reason, containers_removed"
)
_RUN_COLUMNS = (
    "id, session_id, tenant, language, status, created_at, timeout_s, limits_json, code_sha256,"
    " finished_at, duration_ms, exit_code, cpu_seconds, peak_memory_bytes,"
    " stdout_bytes, stdout_sha256, stderr_bytes, stderr_sha256, error, runtime, instance_id"
)
_ARTIFACT_COLUMNS = "run_id, path, size, sha256, mime_type, tenant, created_at"
_EGRESS_COLUMNS = (
    "time, tenant, session_id, run_id, capability, method, host, port, path, status,"
    " bytes_in, bytes_out, duration_ms, decision, reason, resolved_ip, injected_json"
)
_WORKSPACE_COLUMNS = "path, sha256, size, kind, mode, mtime, written_by, version"
_GRANT_COLUMNS = (
    "id, tenant, session_id, capability, params_json, scope_json, approved_by, reason,"
    " created_at, expires_at, revoked_at"
)
_COPY_COLUMNS = (
    "id, tenant, session_id, root, root_path, dest, baseline_sha256, files, bytes, version,"
    " created_at"
)
_PATCH_COLUMNS = (
    "id, copy_id, tenant, session_id, created_at, version, sha256, size, entries_json,"
    " held_back_json, refused_json, ignored_json, source_sha256"
)
_PATCH_JSON = ("entries", "held_back", "refused", "ignored")

_APPROVAL_COLUMNS = (
    "id, tenant, session_id, capability, params_json, ttl_s, reason, status, created_at,"
    " expires_at, decided_at, decided_by, grant_id"
)
_DRILL_COLUMNS = (
    "id, target, tenant, started_at, finished_at, held, failed, not_applicable,"
    " sessions_json, rows_json"
)


def _insert_sql(table: str, columns: str) -> str:
    """An INSERT of `columns` taking named parameters of the same names."""
    placeholders = ", ".join(f":{c.strip()}" for c in columns.split(","))
    return f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"


_INSERT_SESSION = _insert_sql("sessions", _SESSION_COLUMNS)
_INSERT_RUN = _insert_sql("runs", _RUN_COLUMNS)
_INSERT_ARTIFACT = _insert_sql("artifacts", _ARTIFACT_COLUMNS)
_INSERT_EGRESS = _insert_sql("egress_log", _EGRESS_COLUMNS)
_INSERT_GRANT = _insert_sql("grants", _GRANT_COLUMNS)
_INSERT_DRILL = _insert_sql("drills", _DRILL_COLUMNS)
_INSERT_APPROVAL = _insert_sql("approvals", _APPROVAL_COLUMNS)
_INSERT_COPY = _insert_sql("hatch_copies", _COPY_COLUMNS)
_INSERT_PATCH = _insert_sql("hatch_patches", _PATCH_COLUMNS)


def _json_fields(params: dict[str, Any], *names: str) -> dict[str, Any]:
    """Store the model fields `names` as `<name>_json` columns."""
    for name in names:
        params[f"{name}_json"] = json.dumps(params.pop(name), sort_keys=True)
    return params


def _from_json_fields(row: sqlite3.Row, *names: str) -> dict[str, Any]:
    fields = dict(row)
    for name in names:
        fields[name] = json.loads(fields.pop(f"{name}_json"))
    return fields


def _where(filters: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """A WHERE clause for the filters that are set (column names are ours, never input)."""
    chosen = {column: value for column, value in filters.items() if value is not None}
    if not chosen:
        return "", ()
    return " WHERE " + " AND ".join(f"{c} = ?" for c in chosen), tuple(chosen.values())


def _run_params(rec: RunRecord) -> dict[str, Any]:
    params = rec.model_dump()
    params["limits_json"] = json.dumps(params.pop("limits"), sort_keys=True)
    return params


def _run_from_row(row: sqlite3.Row) -> RunRecord:
    fields = dict(row)
    fields["limits"] = json.loads(fields.pop("limits_json"))
    return RunRecord.model_validate(fields)


def _connect(path: Path) -> sqlite3.Connection:
    private_dir(path.parent)
    # Create the file 0600 ourselves: SQLite gives the -wal and -shm files the same mode.
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    # isolation_level=None: no implicit transactions; writes open their own (see _write).
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        # First, so that even switching to WAL waits out another process's lock.
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode != "wal":
            raise StoreError(f"database {path}: cannot switch to WAL mode (still {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"database {path} has schema version {version}, newer than this "
                    f"Airlock understands ({SCHEMA_VERSION}); upgrade Airlock"
                )
            for statement in _SCHEMA:
                conn.execute(statement)
            _add_missing_columns(conn)
            if version < SCHEMA_VERSION:
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except BaseException:
        conn.close()
        raise
    return conn


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    for table, column, declaration in _ADDED_COLUMNS:
        present = {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


def _head_version(conn: sqlite3.Connection, session_id: str) -> int:
    (version,) = conn.execute(
        "SELECT COALESCE(MAX(version), 0) FROM workspace_versions WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    return int(version)


def _workspace_rows(conn: sqlite3.Connection, session_id: str) -> list[WorkspaceFile]:
    rows = conn.execute(
        f"SELECT {_WORKSPACE_COLUMNS} FROM workspace_files WHERE session_id = ? ORDER BY path",
        (session_id,),
    ).fetchall()
    return [WorkspaceFile.model_validate(dict(row)) for row in rows]


def _changes_since(conn: sqlite3.Connection, session_id: str, version: int) -> dict[str, Change]:
    """The last change of each path committed after `version`."""
    rows = conn.execute(
        "SELECT path, deleted, kind, sha256, size, mode, mtime, written_by, version"
        " FROM workspace_changes WHERE session_id = ? AND version > ? ORDER BY version",
        (session_id, version),
    ).fetchall()
    since: dict[str, Change] = {}
    for row in rows:
        fields = dict(row)
        deleted = fields.pop("deleted")
        after = None if deleted else WorkspaceFile.model_validate(fields)
        since[row["path"]] = Change(written_by=row["written_by"], after=after)
    return since


def _commit(
    conn: sqlite3.Connection,
    session_id: str,
    delta: WorkspaceDelta,
    writer: str | None,
    at: float,
) -> WorkspaceCommit:
    head_version = _head_version(conn, session_id)
    if not 0 <= delta.base_version <= head_version:
        raise StoreError(
            f"workspace of session {session_id!r} has no version {delta.base_version} "
            f"(head is {head_version})"
        )
    head = {f.path: f for f in _workspace_rows(conn, session_id)}
    version = head_version + 1
    merged = merge(
        head,
        delta,
        _changes_since(conn, session_id, delta.base_version),
        writer=writer,
        version=version,
    )
    written, deleted = merged.changes(head)
    if not written and not deleted:
        return WorkspaceCommit(
            base_version=delta.base_version,
            version=head_version,
            applied=0,
            conflicts=tuple(merged.conflicts),
        )
    conn.execute(
        "INSERT INTO workspace_versions (session_id, version, base_version, written_by,"
        " created_at) VALUES (?, ?, ?, ?, ?)",
        (session_id, version, delta.base_version, writer, at),
    )
    conn.executemany(
        "DELETE FROM workspace_files WHERE session_id = ? AND path = ?",
        [(session_id, e.path) for e in deleted],
    )
    conn.executemany(
        f"INSERT OR REPLACE INTO workspace_files (session_id, {_WORKSPACE_COLUMNS})"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (session_id, e.path, e.sha256, e.size, e.kind, e.mode, e.mtime, e.written_by, e.version)
            for e in written
        ],
    )
    conn.executemany(
        "INSERT INTO workspace_changes (session_id, version, path, deleted, kind, sha256, size,"
        " mode, mtime, written_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (session_id, version, e.path, 0, e.kind, e.sha256, e.size, e.mode, e.mtime, writer)
            for e in written
        ]
        + [(session_id, version, e.path, 1, e.kind, "", 0, 0, 0, writer) for e in deleted],
    )
    return WorkspaceCommit(
        base_version=delta.base_version,
        version=version,
        applied=len(written) + len(deleted),
        conflicts=tuple(merged.conflicts),
    )


class Database:
    """The Airlock database; one connection, used by one thread at a time.

    Every method hops to a worker thread, so the event loop never waits on disk.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        """Use `Database.open`; this only wraps an already prepared connection."""
        self._path = path
        self._conn = conn
        self._lock = threading.Lock()

    @classmethod
    async def open(cls, path: Path) -> Database:
        """Open (creating if needed) the database at `path`, with its parent directory."""
        try:
            conn = await anyio.to_thread.run_sync(_connect, path)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open database {path}: {exc}") from exc
        return cls(path, conn)

    async def close(self) -> None:
        """Close the connection; later calls raise `StoreError`."""
        await self._call(lambda conn: conn.close())

    async def _call(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        def locked() -> _T:
            with self._lock:
                try:
                    return fn(self._conn)
                except sqlite3.Error as exc:
                    raise StoreError(f"database {self._path}: {exc}") from exc

        return await anyio.to_thread.run_sync(locked)

    async def _write(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run `fn` in one transaction: all of its changes are kept, or none."""

        def transaction(conn: sqlite3.Connection) -> _T:
            # IMMEDIATE takes the write lock up front, so a concurrent writer in another
            # process makes us wait (busy_timeout) instead of failing halfway.
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                # SQLite may already have rolled back on its own (e.g. disk full).
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        return await self._call(transaction)

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        return await self._call(lambda conn: conn.execute(sql, params).fetchall())

    # Sessions

    async def create_session(self, rec: SessionRecord) -> None:
        """Insert a new session; an existing id is a `StoreError`."""
        params = rec.model_dump()
        await self._write(lambda conn: conn.execute(_INSERT_SESSION, params))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._fetch(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        )
        return SessionRecord.model_validate(dict(rows[0])) if rows else None

    async def touch_session(
        self, session_id: str, *, last_used_at: float, expires_at: float
    ) -> bool:
        """Record a use of a live session and its new expiry; an ended session stays as it
        was. Whether the session was live (False: it ended, maybe on another server)."""
        cursor = await self._write(
            lambda conn: conn.execute(
                "UPDATE sessions SET last_used_at = ?, expires_at = ?"
                " WHERE id = ? AND ended_at IS NULL",
                (last_used_at, expires_at, session_id),
            )
        )
        return cursor.rowcount == 1

    async def end_session(
        self, session_id: str, *, ended_at: float, reason: str, containers_removed: int
    ) -> None:
        """Record the end of a session; the first end wins, later ones change nothing."""
        await self._write(
            lambda conn: conn.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = ?, containers_removed = ?"
                " WHERE id = ? AND ended_at IS NULL",
                (ended_at, reason, containers_removed, session_id),
            )
        )

    # Runs

    async def create_run(self, rec: RunRecord) -> None:
        """Insert a new run; its session must exist and its id must be new (else `StoreError`)."""
        params = _run_params(rec)
        await self._write(lambda conn: conn.execute(_INSERT_RUN, params))

    async def finish_run(self, rec: RunRecord) -> None:
        """Overwrite the outcome fields of the run `rec.id` (status through error).

        The fields fixed at creation (session, tenant, language, limits, code) are kept.
        A run that was never created is a `StoreError`: its outcome would be lost.
        """
        params = _run_params(rec)

        def update(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "UPDATE runs SET status = :status, finished_at = :finished_at,"
                " duration_ms = :duration_ms, exit_code = :exit_code,"
                " cpu_seconds = :cpu_seconds, peak_memory_bytes = :peak_memory_bytes,"
                " stdout_bytes = :stdout_bytes, stdout_sha256 = :stdout_sha256,"
                " stderr_bytes = :stderr_bytes, stderr_sha256 = :stderr_sha256,"
                " error = :error"
                " WHERE id = :id",
                params,
            ).rowcount

        if await self._write(update) == 0:
            raise StoreError(f"database {self._path}: cannot finish unknown run {rec.id!r}")

    async def get_run(self, run_id: str) -> RunRecord | None:
        rows = await self._fetch(f"SELECT {_RUN_COLUMNS} FROM runs WHERE id = ?", (run_id,))
        return _run_from_row(rows[0]) if rows else None

    async def list_runs(
        self, *, session_id: str | None = None, tenant: str | None = None, limit: int = 50
    ) -> list[RunRecord]:
        """Runs matching every filter given, newest first, at most `limit` of them."""
        if limit < 0:
            # SQLite reads a negative LIMIT as "no limit".
            raise ValueError(f"limit must be >= 0, not {limit}")
        where: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        sql = f"SELECT {_RUN_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        # rowid breaks ties between runs created within the same clock tick.
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        params.append(limit)
        return [_run_from_row(row) for row in await self._fetch(sql, params)]

    async def mark_unfinished_runs(
        self, *, instance_ids: Sequence[str], status: RunStatus, error: str, finished_at: float
    ) -> int:
        """End every run still `running` that one of `instance_ids` owns (servers that
        died: see `instances.py`); return how many."""
        ids = list(instance_ids)
        placeholders = ", ".join("?" * len(ids))
        return await self._write(
            lambda conn: (
                conn.execute(
                    "UPDATE runs SET status = ?, error = ?, finished_at = ?"
                    f" WHERE status = 'running' AND instance_id IN ({placeholders})",
                    (status, error, finished_at, *ids),
                ).rowcount
            )
        )

    # Artifacts

    async def add_artifacts(self, records: Sequence[ArtifactRecord]) -> None:
        """Insert all of `records` or none; a (run_id, path) already present is a `StoreError`."""
        params = [rec.model_dump() for rec in records]
        await self._write(lambda conn: conn.executemany(_INSERT_ARTIFACT, params))

    async def get_artifact(self, run_id: str, path: str) -> ArtifactRecord | None:
        rows = await self._fetch(
            f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE run_id = ? AND path = ?",
            (run_id, path),
        )
        return ArtifactRecord.model_validate(dict(rows[0])) if rows else None

    async def list_artifacts(self, run_id: str) -> list[ArtifactRecord]:
        """The artifacts of one run, ordered by path."""
        rows = await self._fetch(
            f"SELECT {_ARTIFACT_COLUMNS} FROM artifacts WHERE run_id = ? ORDER BY path",
            (run_id,),
        )
        return [ArtifactRecord.model_validate(dict(row)) for row in rows]

    # Egress decisions and capability grants

    async def add_egress(self, records: Sequence[EgressRecord]) -> None:
        params = [_json_fields(rec.model_dump(), "injected") for rec in records]
        if params:
            await self._write(lambda conn: conn.executemany(_INSERT_EGRESS, params))

    async def list_egress(
        self,
        *,
        tenant: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        limit: int = 200,
    ) -> list[EgressRecord]:
        """Egress decisions, oldest first, of one run, session or tenant (or all)."""
        if limit < 0:
            raise ValueError("limit must be 0 or more")
        where, args = _where({"tenant": tenant, "session_id": session_id, "run_id": run_id})
        rows = await self._fetch(
            f"SELECT {_EGRESS_COLUMNS} FROM (SELECT seq, {_EGRESS_COLUMNS} FROM egress_log"
            f"{where} ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (*args, limit),
        )
        return [EgressRecord.model_validate(_from_json_fields(row, "injected")) for row in rows]

    async def egress_counts(
        self, *, since: float, tenant: str | None = None, except_tenant: str | None = None
    ) -> list[EgressCount]:
        """Egress decisions from `since` on, summed by rule, verdict and destination;
        of one tenant, or of all but `except_tenant`."""
        where = ["time >= ?"]
        args: list[Any] = [since]
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if except_tenant is not None:
            where.append("tenant != ?")
            args.append(except_tenant)
        rows = await self._fetch(
            # With exactly one max() aggregate, SQLite takes the bare column (reason)
            # from the row holding that max: the latest decision of each group.
            "SELECT capability AS rule, decision, host, port, COUNT(*) AS count,"
            " MAX(time) AS last_time, reason"
            f" FROM egress_log WHERE {' AND '.join(where)}"
            " GROUP BY capability, decision, host, port ORDER BY count DESC, host",
            args,
        )
        return [EgressCount.model_validate(dict(row)) for row in rows]

    async def last_egress_use(
        self, *, tenant: str | None = None, except_tenant: str | None = None
    ) -> dict[str, float]:
        """The last time each rule let a request out, over all time."""
        where = ["decision != 'deny'", "capability IS NOT NULL"]
        args: list[Any] = []
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if except_tenant is not None:
            where.append("tenant != ?")
            args.append(except_tenant)
        rows = await self._fetch(
            f"SELECT capability, MAX(time) FROM egress_log WHERE {' AND '.join(where)}"
            " GROUP BY capability",
            args,
        )
        return {str(row[0]): float(row[1]) for row in rows}

    async def record_grant(self, rec: GrantRecord) -> None:
        params = _json_fields(rec.model_dump(), "params", "scope")
        await self._write(lambda conn: conn.execute(_INSERT_GRANT, params))

    async def mark_grants_revoked(self, grant_ids: Sequence[str], *, at: float) -> None:
        rows = [(at, grant_id) for grant_id in grant_ids]
        if rows:
            await self._write(
                lambda conn: conn.executemany(
                    "UPDATE grants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", rows
                )
            )

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        rows = await self._fetch(f"SELECT {_GRANT_COLUMNS} FROM grants WHERE id = ?", (grant_id,))
        if not rows:
            return None
        return GrantRecord.model_validate(_from_json_fields(rows[0], "params", "scope"))

    async def list_grants(
        self, *, tenant: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[GrantRecord]:
        """Grants, newest first."""
        if limit < 0:
            raise ValueError("limit must be 0 or more")
        where, args = _where({"tenant": tenant, "session_id": session_id})
        rows = await self._fetch(
            f"SELECT {_GRANT_COLUMNS} FROM grants{where} ORDER BY created_at DESC LIMIT ?",
            (*args, limit),
        )
        return [
            GrantRecord.model_validate(_from_json_fields(row, "params", "scope")) for row in rows
        ]

    # Run inputs

    async def add_run_inputs(self, run_id: str, files: Sequence[WorkspaceFile]) -> None:
        """Record the files run `run_id` started with (all or none)."""
        params = [(run_id, f.path, f.sha256, f.size) for f in files]
        if params:
            await self._write(
                lambda conn: conn.executemany(
                    "INSERT INTO run_inputs (run_id, path, sha256, size) VALUES (?, ?, ?, ?)",
                    params,
                )
            )

    async def list_run_inputs(self, run_id: str) -> list[WorkspaceFile]:
        """The files a run started with, ordered by path; empty for none or an unknown run."""
        rows = await self._fetch(
            "SELECT path, sha256, size FROM run_inputs WHERE run_id = ? ORDER BY path", (run_id,)
        )
        return [WorkspaceFile.model_validate(dict(row)) for row in rows]

    # Approvals

    async def create_approval(
        self,
        rec: ApprovalRecord,
        *,
        max_pending: int | None = None,
        max_pending_tenant: int | None = None,
    ) -> str | None:
        """Insert `rec`, unless its session already has `max_pending` approvals still
        pending (unexpired at `rec.created_at`) or its tenant `max_pending_tenant`: counted
        and inserted in one transaction so concurrent requests cannot overshoot. The cap
        that refused it ("session" or "tenant"), or None when inserted."""
        params = _json_fields(rec.model_dump(), "params")
        pending = (
            "SELECT COUNT(*) FROM approvals WHERE tenant = ? AND status = 'pending'"
            " AND expires_at > ?"
        )

        def insert(conn: sqlite3.Connection) -> str | None:
            if max_pending is not None:
                (mine,) = conn.execute(
                    pending + " AND session_id = ?", (rec.tenant, rec.created_at, rec.session_id)
                ).fetchone()
                if mine >= max_pending:
                    return "session"
            if max_pending_tenant is not None:
                (all_sessions,) = conn.execute(pending, (rec.tenant, rec.created_at)).fetchone()
                if all_sessions >= max_pending_tenant:
                    return "tenant"
            conn.execute(_INSERT_APPROVAL, params)
            return None

        return await self._write(insert)

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = await self._fetch(
            f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE id = ?", (approval_id,)
        )
        return ApprovalRecord.model_validate(_from_json_fields(rows[0], "params")) if rows else None

    async def list_approvals(
        self, *, tenant: str | None = None, status: str | None = None, limit: int = 100
    ) -> list[ApprovalRecord]:
        """Approvals, oldest first."""
        if limit < 0:
            raise ValueError("limit must be 0 or more")
        where, args = _where({"tenant": tenant, "status": status})
        rows = await self._fetch(
            f"SELECT {_APPROVAL_COLUMNS} FROM approvals{where} ORDER BY created_at LIMIT ?",
            (*args, limit),
        )
        return [ApprovalRecord.model_validate(_from_json_fields(r, "params")) for r in rows]

    async def move_approval(
        self,
        approval_id: str,
        *,
        from_status: str,
        to_status: str,
        at: float,
        by: str | None = None,
        grant_id: str | None = None,
        live_at: float | None = None,
    ) -> bool:
        """Move one approval from `from_status` to `to_status`, atomically; False when it
        is not in `from_status` (or, with `live_at`, expired by then): someone else won."""
        sql = (
            "UPDATE approvals SET status = ?, decided_at = COALESCE(decided_at, ?),"
            " decided_by = COALESCE(?, decided_by), grant_id = COALESCE(?, grant_id)"
            " WHERE id = ? AND status = ?"
        )
        args: list[Any] = [to_status, at, by, grant_id, approval_id, from_status]
        if live_at is not None:
            sql += " AND expires_at > ?"
            args.append(live_at)
        return bool(await self._write(lambda conn: conn.execute(sql, args).rowcount))

    async def expire_approvals(
        self, *, now: float, session_id: str | None = None
    ) -> list[ApprovalRecord]:
        """Mark pending approvals past their wait (or every pending one of `session_id`,
        which ended) expired; return them as they were."""

        def expire(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            where = "status = 'pending' AND " + (
                "session_id = ?" if session_id is not None else "expires_at <= ?"
            )
            arg = session_id if session_id is not None else now
            rows = conn.execute(
                f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE {where}", (arg,)
            ).fetchall()
            conn.execute(
                f"UPDATE approvals SET status = 'expired', decided_at = ? WHERE {where}",
                (now, arg),
            )
            return rows

        rows = await self._write(expire)
        return [ApprovalRecord.model_validate(_from_json_fields(r, "params")) for r in rows]

    # Drills

    async def record_drill(self, rec: DrillRecord) -> None:
        params = _json_fields(rec.model_dump(), "sessions", "rows")
        await self._write(lambda conn: conn.execute(_INSERT_DRILL, params))

    async def list_drills(self, *, limit: int = 20) -> list[DrillRecord]:
        """Drills, newest first."""
        if limit < 0:
            raise ValueError("limit must be 0 or more")
        rows = await self._fetch(
            f"SELECT {_DRILL_COLUMNS} FROM drills ORDER BY started_at DESC LIMIT ?", (limit,)
        )
        return [DrillRecord.model_validate(_from_json_fields(r, "sessions", "rows")) for r in rows]

    # Session workspaces

    async def workspace_head(self, session_id: str) -> WorkspaceHead:
        """The current version of a session's workspace and its entries, read together.

        A session without commits (or unknown) is version 0 with no entries.
        """

        def read(conn: sqlite3.Connection) -> WorkspaceHead:
            # One lock holder at a time, and commits write in one transaction: the version
            # and the entries read here always belong together.
            return WorkspaceHead(
                version=_head_version(conn, session_id),
                files=tuple(_workspace_rows(conn, session_id)),
            )

        return await self._call(read)

    async def commit_workspace(
        self, session_id: str, delta: WorkspaceDelta, *, writer: str | None, at: float
    ) -> WorkspaceCommit:
        """Lay `delta` onto the session's current head in one transaction.

        `writer` (a run id, or another name such as a copy-in) is recorded as the last writer
        of every entry the commit changes. Paths other writers changed since
        `delta.base_version` merge as `store.workspace.merge` describes; every path where
        the two differ is in the result's `conflicts`. A commit that changes nothing makes
        no new version. The session must exist (else `StoreError`).
        """
        return await self._write(lambda conn: _commit(conn, session_id, delta, writer, at))

    # Hatch copies and patches

    async def add_copy(self, rec: HatchCopyRecord) -> None:
        params = rec.model_dump()
        await self._write(lambda conn: conn.execute(_INSERT_COPY, params))

    async def get_copy(self, copy_id: str) -> HatchCopyRecord | None:
        rows = await self._fetch(
            f"SELECT {_COPY_COLUMNS} FROM hatch_copies WHERE id = ?", (copy_id,)
        )
        return HatchCopyRecord.model_validate(dict(rows[0])) if rows else None

    async def add_patch(self, rec: PatchRecord) -> None:
        params = _json_fields(rec.model_dump(), *_PATCH_JSON)
        await self._write(lambda conn: conn.execute(_INSERT_PATCH, params))

    async def get_patch(self, patch_id: str) -> PatchRecord | None:
        rows = await self._fetch(
            f"SELECT {_PATCH_COLUMNS} FROM hatch_patches WHERE id = ?", (patch_id,)
        )
        return (
            PatchRecord.model_validate(_from_json_fields(rows[0], *_PATCH_JSON)) if rows else None
        )

    async def list_patches(
        self, *, session_id: str | None = None, limit: int = 50
    ) -> list[PatchRecord]:
        """Patches, newest first, of one session (or all)."""
        if limit < 0:
            raise ValueError("limit must be 0 or more")
        where, args = _where({"session_id": session_id})
        rows = await self._fetch(
            f"SELECT {_PATCH_COLUMNS} FROM hatch_patches{where}"
            " ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (*args, limit),
        )
        return [PatchRecord.model_validate(_from_json_fields(row, *_PATCH_JSON)) for row in rows]

    async def find_patch(self, copy_id: str, source_sha256: str) -> PatchRecord | None:
        """The first patch of a copy made from exactly this source, if one was made already."""
        rows = await self._fetch(
            f"SELECT {_PATCH_COLUMNS} FROM hatch_patches WHERE copy_id = ? AND source_sha256 = ?"
            " ORDER BY created_at, rowid LIMIT 1",
            (copy_id, source_sha256),
        )
        return (
            PatchRecord.model_validate(_from_json_fields(rows[0], *_PATCH_JSON)) if rows else None
        )
