"""The store's tables as SQLAlchemy Core objects: what the queries of `database/` and
`workspace_sql.py` are built from, the same on SQLite and PostgreSQL.

The tables themselves are made and changed only by the migrations (`migrations/`); this
module describes the schema at the migrations' head, and a test checks the two agree.
Nothing here opens a connection.

Types are chosen for both databases: `Seconds` is a double on PostgreSQL (its REAL is
single precision, which would round UNIX times to minutes) and REAL on SQLite; every
integer is a BIGINT on PostgreSQL (sizes and byte counts pass 2**31) and INTEGER on SQLite.
"""

from __future__ import annotations

from typing import get_args

from sqlalchemy import (
    REAL,
    BigInteger,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.types import TypeEngine

from .records import ApprovalStatus, EntryKind, RunStatus, TaskStatus

Seconds: TypeEngine[float] = Double().with_variant(REAL(), "sqlite")
Count: TypeEngine[int] = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData()


def _one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    quoted = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({quoted})")


RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)
APPROVAL_STATUSES: tuple[str, ...] = get_args(ApprovalStatus)
ENTRY_KINDS: tuple[str, ...] = get_args(EntryKind)
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)

sessions = Table(
    "sessions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("created_at", Seconds, nullable=False),
    Column("last_used_at", Seconds, nullable=False),
    Column("expires_at", Seconds, nullable=False),
    Column("ended_at", Seconds),
    Column("end_reason", Text),
    Column("containers_removed", Count, nullable=False, server_default="0"),
    # A fork's parent session and the workspace version it started at (migration 0004).
    Column("parent_id", Text),
    Column("parent_version", Count),
)

runs = Table(
    "runs",
    metadata,
    Column("id", Text, primary_key=True),
    Column("session_id", Text, ForeignKey("sessions.id"), nullable=False),
    Column("tenant", Text, nullable=False),
    Column("language", Text, nullable=False),
    Column("status", Text, _one_of("status", RUN_STATUSES), nullable=False),
    Column("created_at", Seconds, nullable=False),
    Column("timeout_s", Count, nullable=False),
    Column("limits_json", Text, nullable=False),
    Column("code_sha256", Text, nullable=False),
    Column("finished_at", Seconds),
    Column("duration_ms", Count),
    Column("exit_code", Count),
    Column("cpu_seconds", Seconds),
    Column("peak_memory_bytes", Count),
    Column("stdout_bytes", Count, nullable=False, server_default="0"),
    Column("stdout_sha256", Text),
    Column("stderr_bytes", Count, nullable=False, server_default="0"),
    Column("stderr_sha256", Text),
    Column("error", Text),
    Column("runtime", Text, nullable=False, server_default=""),
    Column("instance_id", Text, nullable=False, server_default=""),
    # The owner's claim epoch when the run started, its fencing token (migration 0005).
    Column("claim_epoch", Count, nullable=False, server_default="0"),
    # Insertion order, which breaks ties between runs created within one clock tick
    # (migration 0002: an identity on PostgreSQL, the rowid copied by a trigger on SQLite).
    Column("seq", Count, Identity()),
)
# created_at trails the filter column so "newest first" of one session or tenant is read
# straight off the index.
Index("runs_by_session", runs.c.session_id, runs.c.created_at)
Index("runs_by_tenant", runs.c.tenant, runs.c.created_at)

# The primary key (run_id, path) is also the index for lookups by run_id.
artifacts = Table(
    "artifacts",
    metadata,
    Column("run_id", Text, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("path", Text, primary_key=True),
    Column("size", Count, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("mime_type", Text, nullable=False),
    Column("tenant", Text, nullable=False),
    Column("created_at", Seconds, nullable=False),
)

workspace_files = Table(
    "workspace_files",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True),
    Column("path", Text, primary_key=True),
    Column("sha256", Text, nullable=False),
    Column("size", Count, nullable=False),
    Column("kind", Text, _one_of("kind", ENTRY_KINDS), nullable=False, server_default="file"),
    Column("mode", Count, nullable=False, server_default="420"),
    Column("mtime", Count, nullable=False, server_default="0"),
    Column("written_by", Text),
    Column("version", Count, nullable=False, server_default="0"),
)

egress_log = Table(
    "egress_log",
    metadata,
    Column("seq", Count, primary_key=True, autoincrement=True),
    Column("time", Seconds, nullable=False),
    Column("tenant", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("run_id", Text, nullable=False),
    Column("capability", Text),
    Column("method", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("port", Count, nullable=False),
    Column("path", Text, nullable=False),
    Column("status", Count, nullable=False),
    Column("bytes_in", Count, nullable=False),
    Column("bytes_out", Count, nullable=False),
    Column("duration_ms", Count, nullable=False),
    Column("decision", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("resolved_ip", Text),
    Column("injected_json", Text, nullable=False),
    sqlite_autoincrement=True,
)
Index("egress_by_run", egress_log.c.run_id, egress_log.c.seq)
Index("egress_by_session", egress_log.c.session_id, egress_log.c.seq)

grants = Table(
    "grants",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("capability", Text, nullable=False),
    Column("params_json", Text, nullable=False),
    Column("scope_json", Text, nullable=False),
    Column("approved_by", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", Seconds, nullable=False),
    Column("expires_at", Seconds, nullable=False),
    Column("revoked_at", Seconds),
)
Index("grants_by_tenant", grants.c.tenant, grants.c.created_at)

# Capability requests waiting for the operator (shared by the server and the CLI).
approvals = Table(
    "approvals",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("capability", Text, nullable=False),
    Column("params_json", Text, nullable=False),
    Column("ttl_s", Count, nullable=False),
    Column("reason", Text, nullable=False),
    Column("status", Text, _one_of("status", APPROVAL_STATUSES), nullable=False),
    Column("created_at", Seconds, nullable=False),
    Column("expires_at", Seconds, nullable=False),
    Column("decided_at", Seconds),
    Column("decided_by", Text),
    Column("grant_id", Text),
)
Index("approvals_by_status", approvals.c.status, approvals.c.created_at)

# Tool calls that became MCP tasks (migration 0006): the JSON-RPC outcome once ended.
tasks = Table(
    "tasks",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("principal", Text, nullable=False),
    Column("tool", Text, nullable=False),
    Column("status", Text, _one_of("status", TASK_STATUSES), nullable=False),
    Column("status_message", Text),
    Column("created_at", Seconds, nullable=False),
    Column("updated_at", Seconds, nullable=False),
    Column("ended_at", Seconds),
    Column("ttl_s", Count, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("run_id", Text),
    Column("result_json", Text),
    Column("error_json", Text),
    Column("cancel_requested_at", Seconds),
    # While `input_required`: what the client is asked, and the call to retry with its answers.
    Column("input_requests_json", Text),
    Column("call_json", Text),
)
# The tasks a dead instance leaves open are failed with its runs.
Index("tasks_by_instance", tasks.c.instance_id, tasks.c.status)

# Kept browsers (`tools/kept_browsers.py`, migration 0007): one row a browser, kept by the
# server `instance_id`; open while `closed_at` is null (a fleet's per-tenant cap counts
# those); each step's browse run in kept_browser_runs.
kept_browsers = Table(
    "kept_browsers",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("opened_at", Seconds, nullable=False),
    Column("closed_at", Seconds),
    Column("closed_why", Text),
)
Index("kept_browsers_open", kept_browsers.c.tenant, kept_browsers.c.closed_at)
Index("kept_browsers_by_instance", kept_browsers.c.instance_id, kept_browsers.c.closed_at)
kept_browser_runs = Table(
    "kept_browser_runs",
    metadata,
    Column(
        "browser_id",
        Text,
        ForeignKey("kept_browsers.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("step", Count, primary_key=True, autoincrement=False),
    Column("run_id", Text, nullable=False),
)

# Each `airlock drill`: when, against which policy, what held (rows as JSON).
drills = Table(
    "drills",
    metadata,
    Column("id", Text, primary_key=True),
    Column("target", Text, nullable=False),
    Column("tenant", Text, nullable=False),
    Column("started_at", Seconds, nullable=False),
    Column("finished_at", Seconds, nullable=False),
    Column("held", Count, nullable=False),
    Column("failed", Count, nullable=False),
    Column("not_applicable", Count, nullable=False),
    Column("sessions_json", Text, nullable=False),
    Column("rows_json", Text, nullable=False),
)

# What each run started from (the session workspace plus the call's files), for the
# audit; contents are blobs.
run_inputs = Table(
    "run_inputs",
    metadata,
    Column("run_id", Text, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("path", Text, primary_key=True),
    Column("sha256", Text, nullable=False),
    Column("size", Count, nullable=False),
)

# One row per committed workspace version; version 0 (the empty start) has none.
workspace_versions = Table(
    "workspace_versions",
    metadata,
    Column("session_id", Text, ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Count, primary_key=True, autoincrement=False),
    Column("base_version", Count, nullable=False),
    Column("written_by", Text),
    Column("created_at", Seconds, nullable=False),
)

# What each version changed, path by path: the state after, or deleted = 1.
workspace_changes = Table(
    "workspace_changes",
    metadata,
    Column("session_id", Text, primary_key=True),
    Column("version", Count, primary_key=True, autoincrement=False),
    Column("path", Text, primary_key=True),
    Column("deleted", Count, nullable=False),
    Column("kind", Text, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("size", Count, nullable=False),
    Column("mode", Count, nullable=False),
    Column("mtime", Count, nullable=False),
    Column("written_by", Text),
    ForeignKeyConstraint(
        ["session_id", "version"],
        ["workspace_versions.session_id", "workspace_versions.version"],
        ondelete="CASCADE",
    ),
)

hatch_copies = Table(
    "hatch_copies",
    metadata,
    Column("id", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("session_id", Text, ForeignKey("sessions.id"), nullable=False),
    Column("root", Text, nullable=False),
    Column("root_path", Text, nullable=False),
    Column("dest", Text, nullable=False),
    Column("baseline_sha256", Text, nullable=False),
    Column("files", Count, nullable=False),
    Column("bytes", Count, nullable=False),
    Column("version", Count, nullable=False),
    Column("created_at", Seconds, nullable=False),
)

hatch_patches = Table(
    "hatch_patches",
    metadata,
    Column("id", Text, primary_key=True),
    Column("copy_id", Text, ForeignKey("hatch_copies.id"), nullable=False),
    Column("tenant", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("created_at", Seconds, nullable=False),
    Column("version", Count, nullable=False),
    Column("sha256", Text, nullable=False),
    Column("size", Count, nullable=False),
    Column("entries_json", Text, nullable=False),
    Column("held_back_json", Text, nullable=False),
    Column("refused_json", Text, nullable=False),
    Column("ignored_json", Text, nullable=False),
    Column("source_sha256", Text, nullable=False, server_default=""),
    # As runs.seq: insertion order, for ties of created_at.
    Column("seq", Count, Identity()),
)
Index("patches_by_copy", hatch_patches.c.copy_id, hatch_patches.c.sha256)

# A fleet's shared bytes (postgres/blobs.py, postgres/documents.py); made on SQLite too,
# where nothing writes them (one server keeps blobs and the vault as files): one schema for both.
blob_contents = Table(
    "blob_contents",
    metadata,
    Column("sha256", Text, primary_key=True),
    Column("size", Count, nullable=False),
    Column("chunk_bytes", Count, nullable=False),
)

blob_chunks = Table(
    "blob_chunks",
    metadata,
    Column("sha256", Text, primary_key=True),
    Column("seq", Count, primary_key=True, autoincrement=False),
    Column("data", LargeBinary, nullable=False),
)

documents = Table(
    "documents",
    metadata,
    Column("name", Text, primary_key=True),
    Column("body", LargeBinary),
    Column("updated_at", Seconds),
)

# A fleet's live replicas (pg_claims.py): each holds the advisory lock `lock_key` while it
# lives; a row whose lock is free names a dead one. Empty on SQLite, whose claims are flocks.
airlock_instances = Table(
    "airlock_instances",
    metadata,
    Column("id", Text, primary_key=True),
    Column("lock_key", BigInteger, nullable=False),
    Column("claimed_at", Seconds, nullable=False),
    # The claim's current epoch, new at each taking (migration 0005).
    Column("epoch", Count, nullable=False, server_default="0"),
)
