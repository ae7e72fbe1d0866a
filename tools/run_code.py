"""run_code: validate a call, run it in a fresh sandbox, keep what it produced.

The call starts from the current version of the session workspace (files, directories,
modes, mtimes) with the call's files laid over it. What the run changed relative to that
version is its delta: changed files become artifacts of the run, and the delta is
committed onto the workspace head, merging with what parallel calls committed meanwhile
(conflicts are reported, never dropped). Output goes back in the untrusted envelope. The
run record is completed on every path, cancellation included (`run_record.py`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping, Sequence

from mcp_types import CallToolResult

from airlock.errors import InvalidRequest, LimitExceeded, UnsafePath
from airlock.languages import Language
from airlock.policies import Policy
from airlock.sandbox import (
    RESERVED_PREFIX,
    ArtifactCaps,
    InputDir,
    InputFile,
    JobOutcome,
    JobSpec,
    limits_of,
    safe_relative_path,
)
from airlock.sandbox.file_transfer import settle
from airlock.sandbox.gitbase import is_repository_internal
from airlock.store import (
    ArtifactRecord,
    Staging,
    WorkspaceDelta,
    WorkspaceFile,
    WorkspaceHead,
    ancestors,
    diff,
)

from .artifacts import artifact_uri, classify, guess_mime_type
from .box import BoxCall, Network, artifact, new_job, run_in_box
from .capabilities import live_grants
from .context import Services, Session
from .fleet import refuse_revoked
from .models import STREAM_PATHS, ArtifactInfo, FileArg
from .progress import Progress
from .run_result import Kept, result_pictures, run_result

MAX_CODE_BYTES = 1024 * 1024
# An artifact's type is sniffed from all of its bytes up to this size (an image must end
# with its end marker), from its first bytes past it: memory per run stays a constant.
SNIFF_WHOLE_BYTES = 4 * 1024 * 1024
SNIFF_HEAD_BYTES = 64 * 1024


async def run_code(
    services: Services,
    session: Session,
    *,
    code: str,
    language: Language,
    files: Sequence[FileArg],
    timeout_s: int | None,
    capabilities: Sequence[str] = (),
    progress: Progress | None = None,
) -> CallToolResult:
    policy = services.policy_for(session.tenant)
    timeout = _timeout(timeout_s, policy)
    if len(code.encode()) > MAX_CODE_BYTES:
        raise LimitExceeded(
            f"code is over {MAX_CODE_BYTES} bytes; put large data in `files` instead"
        )
    call_data = _decode_files(files, policy)
    mtime = int(services.clock())
    call_files = {
        path: InputFile(path=path, sha256=_sha256(data), size=len(data), mtime=mtime)
        for path, data in call_data.items()
    }
    grants = await live_grants(services, session, list(capabilities))
    await refuse_revoked(services, grants)
    backend, image, runtime = await services.engine.ready(policy.image)
    head, inputs, dirs = await _workspace_inputs(services, session, call_files)
    job = new_job(
        session,
        image=image,
        runtime=runtime,
        language=language,
        code=code,
        files=tuple(inputs.values()),
        dirs=tuple(dirs),
        timeout_s=timeout,
        limits=limits_of(policy),
        stream_cap_bytes=policy.output.stream_cap_bytes,
        artifact_caps=ArtifactCaps(
            max_files=policy.files.max_artifact_files,
            max_file_bytes=policy.files.max_artifact_file_bytes,
            max_total_bytes=policy.files.max_artifact_total_bytes,
            max_entries=policy.files.max_workspace_entries,
        ),
    )
    run_id = job.run_id

    async def keep(outcome: JobOutcome, staging: Staging) -> tuple[Kept, dict[str, str]]:
        kept = await _keep_workspace(services, job, head, inputs, outcome, staging)
        return kept, await _keep_streams(services, job, outcome)

    async def prepare() -> None:
        await _keep_inputs(services, run_id, inputs, call_data)

    call = BoxCall(
        services, session, policy, backend, job, Network(grants=grants, secrets="inject"),
        recorded_limits=policy.limits.model_dump(), source=code.encode(), progress=progress,
    )  # fmt: skip
    ran = await run_in_box(call, keep, prepare=prepare)
    kept, stream_uris = ran.kept
    pictures = await result_pictures(services, kept)
    return run_result(
        policy, timeout, session, ran.record, ran.outcome, kept, stream_uris, ran.egress, pictures
    )


def _timeout(timeout_s: int | None, policy: Policy) -> int:
    limits = policy.limits
    if timeout_s is None:
        return limits.timeout_s
    if timeout_s < 1:
        raise InvalidRequest("timeout_s must be at least 1 second")
    if timeout_s > limits.max_timeout_s:
        raise LimitExceeded(
            f"timeout_s={timeout_s} is above the policy maximum of {limits.max_timeout_s} s; "
            "ask for less or split the work into several calls"
        )
    return timeout_s


def _decode_files(files: Sequence[FileArg], policy: Policy) -> dict[str, bytes]:
    """The call's files by validated path."""
    caps = policy.files
    if len(files) > caps.max_input_files:
        raise LimitExceeded(f"{len(files)} files given; at most {caps.max_input_files} per call")
    decoded: dict[str, bytes] = {}
    total = 0
    for arg in files:
        path = safe_relative_path(arg.path, max_length=caps.max_path_length)
        if path.startswith(RESERVED_PREFIX):
            raise UnsafePath(
                f"path {arg.path!r} is inside {RESERVED_PREFIX}, which Airlock reserves"
            )
        if path in decoded:
            raise InvalidRequest(f"path {path!r} is given twice; give each file once")
        data = _decode_content(arg)
        total += len(data)
        if total > caps.max_input_bytes:
            raise LimitExceeded(
                f"files total more than {caps.max_input_bytes} bytes; send less per call "
                "(files written by earlier runs of the session are already in /workspace)"
            )
        decoded[path] = data
    for path in decoded:
        inside = next((a for a in ancestors(path) if a in decoded), None)
        if inside is not None:
            raise InvalidRequest(
                f"path {path!r} needs {inside!r} to be a directory, but it is also given as a "
                "file; give only one of them"
            )
    return decoded


def _decode_content(arg: FileArg) -> bytes:
    if arg.encoding == "utf-8":
        return arg.content.encode()
    try:
        return base64.b64decode(arg.content, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"file {arg.path!r}: content is not valid base64 ({exc})") from exc


async def _workspace_inputs(
    services: Services, session: Session, call_files: dict[str, InputFile]
) -> tuple[WorkspaceHead, dict[str, InputFile], list[InputDir]]:
    """The current workspace version, its files with the call's laid over, its directories."""
    head = await services.db.workspace_head(session.id)
    entries = head.by_path()
    for path in call_files:
        entry = entries.get(path)
        if entry is not None and entry.kind == "dir":
            raise InvalidRequest(
                f"path {path!r} is a directory in the session workspace; give the file "
                "another path or delete the directory in a run first"
            )
        blocker = next(
            (a for a in ancestors(path) if a in entries and entries[a].kind != "dir"), None
        )
        if blocker is not None:
            raise InvalidRequest(
                f"path {path!r} needs {blocker!r} to be a directory, but it is a file in the "
                "session workspace; give another path or delete that file in a run first"
            )
    inputs: dict[str, InputFile] = {}
    dirs: list[InputDir] = []
    for entry in head.files:
        if entry.kind == "dir":
            dirs.append(InputDir(path=entry.path, mode=entry.mode, mtime=entry.mtime))
        elif entry.path not in call_files:
            inputs[entry.path] = InputFile(
                path=entry.path,
                sha256=entry.sha256,
                size=entry.size,
                mode=entry.mode,
                mtime=entry.mtime,
            )
    inputs.update(call_files)
    return head, inputs, dirs


async def _keep_inputs(
    services: Services, run_id: str, inputs: dict[str, InputFile], call_data: dict[str, bytes]
) -> None:
    """The listing of what the run started from, for the audit; the call's own files are
    kept too (the workspace's already are), so every hash in the listing can be read, and
    the backend streams each input from its blob."""
    for data in call_data.values():
        await services.blobs.put(data)
    await services.db.add_run_inputs(
        run_id,
        [WorkspaceFile(path=f.path, sha256=f.sha256, size=f.size) for f in inputs.values()],
    )


async def _keep_workspace(
    services: Services,
    job: JobSpec,
    head: WorkspaceHead,
    inputs: Mapping[str, InputFile],
    outcome: JobOutcome,
    staging: Staging,
) -> Kept:
    """Store the run's changed files as its artifacts, then commit its delta.

    Every file the delta writes becomes an artifact of this run (so a version a later run
    overwrites stays fetchable from this one); the result lists as artifacts only those
    whose content the code produced, not the call's own files passed through unchanged.
    A file's content is a draft of the run (kept here, just before its record is written)
    or a blob the host sent in.
    """
    if outcome.workspace is None:
        return Kept(base=head, delta=WorkspaceDelta(base_version=head.version))
    settled = settle(outcome.workspace, outcome.files, inputs)
    delta = diff(
        head.version,
        head.by_path(),
        settled.entries,
        complete=outcome.listing_complete,
        unknown_dirs=[e.path for e in outcome.workspace if not e.contents_listed],
    )
    now = services.clock()
    records: list[ArtifactRecord] = []
    produced: list[ArtifactRecord] = []
    notes = list(settled.notes)
    for entry in delta.upserts:
        if entry.kind != "file":
            continue
        draft = settled.drafts.get(entry.sha256)
        if draft is not None:
            await staging.keep(draft)
        mime_type, refused = await _mime_type(services, entry.path, entry.sha256, entry.size)
        record = artifact(
            job, entry.path, sha256=entry.sha256, size=entry.size, mime_type=mime_type, at=now
        )
        records.append(record)
        given = inputs.get(entry.path)
        if (given is None or given.sha256 != entry.sha256) and not is_repository_internal(
            entry.path
        ):
            produced.append(record)
            if refused is not None:
                notes.append(f"{entry.path} is not shown as an image: {refused}")
    # Only while the run's record is still open under this server's claim (a fenced
    # replica's files never land: `RunEndedByFleet`).
    commit = await services.db.commit_run(job.session_id, job.run_id, records, delta, at=now)
    artifacts = [
        ArtifactInfo(
            path=r.path,
            size=r.size,
            sha256=r.sha256,
            mime_type=r.mime_type,
            uri=artifact_uri(job.run_id, r.path),
        )
        for r in produced
    ]
    return Kept(
        base=head,
        delta=delta,
        commit=commit,
        artifacts=artifacts,
        notes=notes,
        produced=produced,
    )


async def _mime_type(
    services: Services, path: str, sha256: str, size: int
) -> tuple[str, str | None]:
    """The artifact's type from its bytes: all of them up to SNIFF_WHOLE_BYTES (an image is
    checked to its end marker), the first SNIFF_HEAD_BYTES of a larger file; and for a whole
    file that starts like an image and is not one, why."""
    if size <= SNIFF_WHOLE_BYTES:
        mime_type, refused = classify(path, await services.blobs.read(sha256))
        return mime_type, refused.reason if refused is not None else None
    head = await services.blobs.read(sha256, 0, SNIFF_HEAD_BYTES)
    # A multi-byte character cut at the end of the sample is not binary.
    for cut in range(4):
        try:
            head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return guess_mime_type(path, head[: len(head) - cut]), None
    return guess_mime_type(path, head), None


async def _keep_streams(services: Services, job: JobSpec, outcome: JobOutcome) -> dict[str, str]:
    """Store each non-empty stream (up to its cap) so it can be fetched and audited."""
    now = services.clock()
    uris: dict[str, str] = {}
    records = []
    for name, capture in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
        if not capture.data:
            continue
        sha = await services.blobs.put(capture.data)
        path = STREAM_PATHS[name]
        size = len(capture.data)
        records.append(artifact(job, path, sha256=sha, size=size, mime_type="text/plain", at=now))
        uris[name] = artifact_uri(job.run_id, path)
    await services.db.add_artifacts(records)
    return uris


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
