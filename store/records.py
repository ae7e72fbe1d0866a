"""The records the store keeps: frozen pydantic models, one per table row.

Plain data only: no SQL, no file access, no policy. Timestamps are float UNIX seconds.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from airlock.languages import RunKind

RunStatus = Literal["running", "ok", "error", "timeout", "oom", "killed"]
"""`running` until the run finishes; `error` means the engine side failed (see `error`),
never that the user's code exited non-zero (that is `ok` with an `exit_code`)."""


TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
"""A task's state (the MCP Tasks extension's): the last three are terminal."""

TASK_OPEN: tuple[TaskStatus, ...] = ("working", "input_required")
"""The states a task leaves only once: every other one is its end."""


class SessionRecord(BaseModel):
    """A session lease: who owns it, when it expires, and how it ended."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    created_at: float
    last_used_at: float
    expires_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    containers_removed: int = 0
    parent_id: str | None = None
    """The session this one was forked from (`fork_session`), None for a fresh one."""
    parent_version: int | None = None
    """The parent's workspace version the fork started at."""


class RunRecord(BaseModel):
    """One `run_code` call: what was asked for, and once finished, what came of it."""

    model_config = ConfigDict(frozen=True)

    id: str
    session_id: str
    tenant: str
    language: RunKind
    status: RunStatus
    created_at: float
    timeout_s: int
    limits: dict[str, Any]
    code_sha256: str
    runtime: str = ""
    """OCI runtime of the run's sandbox (runsc, runc); empty for runs recorded before
    Airlock recorded it."""
    instance_id: str = ""
    """The server instance running it (`store/fleet/claims.py`): a later server ends the run
    if this one dies first. Empty for runs recorded before Airlock recorded owners."""
    claim_epoch: int = 0
    """The epoch of its owner's claim when it started (`pg_claims`), set by the store: its
    end and its workspace commit are written only while that claim is current. 0 without
    one (a single server's, or recorded before epochs)."""
    finished_at: float | None = None
    duration_ms: int | None = None
    exit_code: int | None = None
    cpu_seconds: float | None = None
    peak_memory_bytes: int | None = None
    stdout_bytes: int = 0
    stdout_sha256: str | None = None
    stderr_bytes: int = 0
    stderr_sha256: str | None = None
    error: str | None = None
    """Why the engine side failed, if it did; None for a run that went as planned."""


class ArtifactRecord(BaseModel):
    """A file a run left in `/workspace`; its content is the blob named by `sha256`."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    path: str
    size: int
    sha256: str
    mime_type: str
    tenant: str
    created_at: float


EntryKind = Literal["file", "dir"]
"""What a workspace path holds: a regular file or a directory (nothing else is ever kept)."""


class WorkspaceFile(BaseModel):
    """One entry of a session's workspace; a file's content is the blob named by `sha256`."""

    model_config = ConfigDict(frozen=True)

    path: str
    sha256: str
    """Hex SHA-256 of a file's content; empty for a directory."""
    size: int
    kind: EntryKind = "file"
    mode: int = 0o644
    """Permission bits only (`& 0o777`): setuid, setgid and sticky are never kept."""
    mtime: int = 0
    """Modification time in whole UNIX seconds; 0 for entries from before it was kept."""
    written_by: str | None = None
    """The run (or other writer, e.g. a copy-in) that last changed it; None if unknown."""
    version: int = 0
    """The workspace version that last changed it; 0 for entries from before versions."""

    def same_as(self, other: WorkspaceFile | None) -> bool:
        """Whether `other` holds the same thing here: kind, content and mode (not mtime)."""
        return (
            other is not None
            and other.kind == self.kind
            and other.sha256 == self.sha256
            and other.mode == self.mode
        )


EgressVerdict = Literal["allow", "deny", "error"]


PROXY_CHALLENGE = 407
"""An egress record's status for a request without a valid run token: the proxy's challenge,
which a browser answers with the token (not a denial then)."""


class EgressRecord(BaseModel):
    """One egress decision: a request, a connection refused before any request, or a
    tunnel (method CONNECT, path "-"), recorded when it ends with how it ended.

    Header values and query values are never part of a record; `path` keeps query
    keys with their values removed. `bytes_out` is what the sandbox sent upstream,
    `bytes_in` what came back, heads and bodies (a tunnel's: all its bytes).
    """

    model_config = ConfigDict(frozen=True)

    time: float
    tenant: str
    session_id: str
    run_id: str
    capability: str | None
    method: str
    host: str
    port: int
    path: str
    status: int
    bytes_in: int
    bytes_out: int
    duration_ms: int
    decision: EgressVerdict
    reason: str
    resolved_ip: str | None = None
    injected: tuple[str, ...] = ()

    def summary(self) -> EgressSummary:
        """What a run result shows the agent."""
        return EgressSummary.model_validate(self.model_dump(include=_SUMMARY_FIELDS))


class EgressSummary(BaseModel):
    """One egress record as a run result shows it to the agent (see `EgressRecord`)."""

    model_config = ConfigDict(frozen=True)

    method: str
    host: str
    port: int
    path: str
    status: int
    decision: EgressVerdict
    reason: str
    bytes_in: int
    bytes_out: int


_SUMMARY_FIELDS = set(EgressSummary.model_fields)


class GrantRecord(BaseModel):
    """A capability grant as audited: who asked for what, who approved, how long it lived."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    session_id: str
    capability: str
    params: dict[str, str]
    scope: dict[str, list[str] | list[int]]
    approved_by: str
    reason: str
    created_at: float
    expires_at: float
    revoked_at: float | None = None


class DrillRecord(BaseModel):
    """One `airlock drill`: the policy it ran against and each attack's outcome.

    `rows` are {attack, expected, observed, held} with held true, false or null (not
    applicable under that policy); `sessions` are the drill's own sessions, all ended.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    target: str
    tenant: str
    started_at: float
    finished_at: float
    held: int
    failed: int
    not_applicable: int
    sessions: list[str]
    rows: list[dict[str, Any]]


ApprovalStatus = Literal["pending", "approved", "denied", "expired", "used"]
"""`pending` until the operator decides or `expires_at` passes (then `expired`: fail
closed); `used` once the asking session turned the approval into a grant."""


class ReplicaRecord(BaseModel):
    """A replica of a fleet listed in `airlock_instances`, with what PostgreSQL says of its
    claim (`queries/replicas.py`)."""

    model_config = ConfigDict(frozen=True)

    id: str
    claimed_at: float
    live: bool
    """Its advisory lock is held: the replica's claim connection lives."""
    holder_pid: int | None
    """The PostgreSQL backend holding the lock; None when no one holds it (a dead replica
    not yet found by a live one)."""
    last_heartbeat: float | None
    """When the holding connection last ran a query (the claim's heartbeat); None when no
    one holds it, or PostgreSQL does not show this role another backend's activity."""


class ApprovalRecord(BaseModel):
    """A capability request waiting for (or decided by) the operator, because the
    client could not ask its human. `reason` is the agent's text: untrusted."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    session_id: str
    capability: str
    params: dict[str, str]
    ttl_s: int
    reason: str
    status: ApprovalStatus
    created_at: float
    expires_at: float
    decided_at: float | None = None
    decided_by: str | None = None
    grant_id: str | None = None


class HatchCopyRecord(BaseModel):
    """A hatch root copied into a session: from which root, to which directory, and the
    baseline (path -> sha256 and mode, a JSON blob) that patches are computed against."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    session_id: str
    root: str
    """The root's name in the policy."""
    root_path: str
    """The host directory the name meant at copy time; for operators, never for agents."""
    dest: str
    """Directory of the session workspace the root went to."""
    baseline_sha256: str
    files: int
    bytes: int
    version: int
    """The workspace version the copy made."""
    created_at: float


class PatchRecord(BaseModel):
    """A patch of a copied-in root: its text is the blob `sha256`; the lists say what it
    changes, what it held back for a human and what it refused to name."""

    model_config = ConfigDict(frozen=True)

    id: str
    copy_id: str
    tenant: str
    session_id: str
    created_at: float
    version: int
    """The workspace version the patch was computed from."""
    sha256: str
    size: int
    entries: list[dict[str, Any]]
    held_back: list[dict[str, Any]]
    refused: list[dict[str, Any]]
    ignored: list[str] = []
    """New files left out by the policy's ignore globs (caches, build output)."""
    source_sha256: str = ""
    """What the patch was made from (the copy's baseline, the files under its directory,
    the globs that decide, the writer's format), hashed: the same source gives this patch
    back instead of making it again. Empty for patches made before it was kept."""


class EgressCount(BaseModel):
    """Egress decisions of one rule (or none), verdict and destination, summed."""

    model_config = ConfigDict(frozen=True)

    rule: str | None
    """The grant id or "policy:<name>" that decided; None when no rule matched."""
    decision: EgressVerdict
    host: str
    port: int
    count: int
    last_time: float
    reason: str
    """One of the reasons given (the latest)."""


class TaskRecord(BaseModel):
    """A tool call that outlived its answer (`server/tasks`): whose it is, which server
    instance runs it, and once ended, the JSON-RPC result or error the call came to."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    principal: str
    """Who of the tenant called (the token's client id; empty without a token)."""
    tool: str
    status: TaskStatus
    created_at: float
    updated_at: float
    ttl_s: int
    """Seconds the task is kept after it ends."""
    instance_id: str
    """The server instance running the call: when it dies, the task fails with its run."""
    run_id: str | None = None
    status_message: str | None = None
    result: dict[str, Any] | None = None
    """The call's result as the wire had it (a CallToolResult), once `completed`."""
    error: dict[str, Any] | None = None
    """The JSON-RPC error the call raised, once `failed`."""
    ended_at: float | None = None
    cancel_requested_at: float | None = None
    """When its caller asked to cancel it (tasks/cancel, on any server of the records)."""
    input_requests: dict[str, Any] | None = None
    """While `input_required`: the requests the client must answer (tasks/update)."""
    call: dict[str, Any] | None = None
    """While `input_required`: the call to retry with the answers (server-side only)."""


class KeptBrowserStep(BaseModel):
    """One call on a kept browser: the browse run it was, and how that run ended."""

    model_config = ConfigDict(frozen=True)

    step: int
    run_id: str
    status: RunStatus | None = None
    """None while the run's record is missing (not yet written, or removed)."""
    created_at: float | None = None
    duration_ms: int | None = None


class KeptBrowserRecord(BaseModel):
    """A browser a session kept open across browse calls (`tools/kept_browsers.py`): the
    server instance keeping it, when it opened and when and why it closed (open while
    `closed_at` is None), and its calls in order."""

    model_config = ConfigDict(frozen=True)

    id: str
    tenant: str
    session_id: str
    instance_id: str
    opened_at: float
    closed_at: float | None = None
    closed_why: str | None = None
    steps: tuple[KeptBrowserStep, ...] = ()
