"""What a backend is asked to do and what it reports back, platform-neutral.

A tool handler turns a call into a `JobSpec`; a backend (Docker today) carries
it out and returns a `JobOutcome`. Nothing here knows about Docker or MCP.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.languages import RunKind
from airlock.policies import BrowserSettings, Policy
from airlock.store import Draft

Status = Literal["ok", "error", "timeout", "oom", "killed"]


class ContainerLimits(BaseModel):
    """Resource limits of one container, already checked against the policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_mb: int
    cpus: float
    pids: int
    workspace_mb: int
    tmp_mb: int


def limits_of(policy: Policy) -> ContainerLimits:
    """The container limits a policy sets (every run of a server gets the same)."""
    limits = policy.limits
    return ContainerLimits(
        memory_mb=limits.memory_mb,
        cpus=limits.cpus,
        pids=limits.pids,
        workspace_mb=limits.workspace_mb,
        tmp_mb=limits.tmp_mb,
    )


MIB = 1 << 20


def browser_limits(settings: BrowserSettings) -> ContainerLimits:
    """The container limits of a browser box under `settings` (the warm pool's boxes are
    made to the server policy's)."""
    return ContainerLimits(
        memory_mb=settings.memory_mb,
        cpus=settings.cpus,
        pids=settings.pids,
        # The box's own /workspace holds only what comes out: findings, screenshot, downloads.
        workspace_mb=settings.max_bytes // MIB + 16,
        tmp_mb=settings.tmp_mb,
    )


class ArtifactCaps(BaseModel):
    """What may come back out of /workspace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_files: int
    max_file_bytes: int
    max_total_bytes: int
    max_entries: int = 10_000
    """Most entries of the final listing the host reads; later ones are not kept."""


class InputFile(BaseModel):
    """One file to place under /workspace: a blob of the store, never its bytes (the
    backend streams it in); `path` is already validated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)
    mode: int = 0o644
    """Permission bits (`& 0o777` only)."""
    mtime: int = 0
    """Whole UNIX seconds."""


class InputDir(BaseModel):
    """One directory to create under /workspace (it may be empty); `path` is validated."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    mode: int = 0o755
    mtime: int = 0


class EgressMount(BaseModel):
    """The run's way out: the CA to trust. The proxy listens in the sandbox's egress
    directory (`Sandbox.egress_dir`), which the backend prepared when it created it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ca_pem: str


class BrowseJob(BaseModel):
    """What the browser box's driver is asked to do (sandbox/inside/browser.py): the URL and
    actions are already validated by the tool."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    """Empty only for a kept browser's later step, which stays on its page."""
    actions: tuple[dict[str, str | int], ...] = ()
    width: int
    height: int
    max_pages: int
    max_title_chars: int
    """What the report may hold of the title, the URL and the error: the box cuts each to
    the host's limit, so a page with a long one loses its tail, never the whole report."""
    max_url_chars: int
    max_error_chars: int
    screenshot: bool = True
    """Whether the box takes a screenshot (the snapshot is always taken)."""
    max_snapshot_lines: int
    """Most lines of the accessibility snapshot the box renders; it says when it cut."""
    keep: bool = False
    """Leave Chromium running after this job, for another on the same stream
    (`Sandbox.step`): a kept browser (`tools/kept_browsers.py`)."""


class JobSpec(BaseModel):
    """Everything a backend needs to run one call, and nothing it may not see."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    session_id: str
    tenant: str
    image: str
    runtime: str = "runc"
    language: RunKind
    code: str
    env: dict[str, str]
    files: tuple[InputFile, ...] = ()
    dirs: tuple[InputDir, ...] = ()
    timeout_s: float = Field(gt=0)
    limits: ContainerLimits
    stream_cap_bytes: int
    artifact_caps: ArtifactCaps
    egress: EgressMount | None = None
    browse: BrowseJob | None = None
    """Set for a browse: the image is the browser image, whose driver ignores `language`
    and `code` and reads this instead."""
    lifetime_s: float | None = None
    """How long the sandbox may live, when longer than the job's timeout: a kept browser's
    box lives across calls, up to its session's lifetime (the reaper's deadline label)."""


class StreamCapture(BaseModel):
    """One output stream: the kept prefix plus the size and hash of all of it."""

    model_config = ConfigDict(frozen=True)

    data: bytes = b""
    total_bytes: int = 0
    sha256: str = ""


class OutputFile(BaseModel):
    """A new or changed regular file of /workspace, validated by the hatch: its content
    is a draft in the run's staging area (hashed as it was written), not bytes in memory.
    The caller keeps the drafts it records; the staging area drops the rest."""

    model_config = ConfigDict(frozen=True)

    path: str
    blob: Draft

    @property
    def sha256(self) -> str:
        return self.blob.sha256

    @property
    def size(self) -> int:
        return self.blob.size


EntryKind = Literal["file", "dir", "other"]


class WorkspaceEntry(BaseModel):
    """One entry of /workspace when the run ended, as the runner listed it.

    The listing is the whole final tree; the host computes what changed by comparing it
    with the version the run started from. `other` (symlink, FIFO, socket, device) is
    listed only to be reported: it is never kept.
    """

    model_config = ConfigDict(frozen=True)

    path: str
    kind: EntryKind = "file"
    sha256: str = ""
    """Hex SHA-256 of a file's content; empty for anything else."""
    size: int = 0
    mode: int = 0o644
    """`st_mode & 0o7777` as listed; the host keeps `& 0o777`."""
    mtime: int = 0
    """Whole UNIX seconds."""
    contents_listed: bool = True
    """False for a directory the runner could not read: what it holds is unknown, so
    nothing under it is taken as deleted."""


class Usage(BaseModel):
    """What the run cost, read from the engine (or the runner when the engine can't say)."""

    model_config = ConfigDict(frozen=True)

    cpu_seconds: float | None = None
    peak_memory_bytes: int | None = None


class JobOutcome(BaseModel):
    """What happened. A non-zero exit is an outcome, not a failure of the backend."""

    model_config = ConfigDict(frozen=True)

    status: Status
    exit_code: int | None
    duration_ms: int
    stdout: StreamCapture
    stderr: StreamCapture
    files: tuple[OutputFile, ...] = ()
    workspace: tuple[WorkspaceEntry, ...] | None = None
    """The validated final listing (files and directories); None when the run gave none."""
    listing_complete: bool = True
    """False when entries were left out, so absent paths must not be taken as deleted."""
    notes: tuple[str, ...] = ()
    usage: Usage = Usage()
