"""`airlock patch show|apply`: a human (or CI) reviews a hatch patch and applies it.

Everything a patch holds was chosen by sandboxed code, including file names, so `show`
makes every control, invisible and bidi character visible as `<U+XXXX>` before it reaches
a terminal (`terminal.safe_line` for each name, `safe_block` for the patch text, streamed
from the blob store a piece at a time; `--raw` gives the exact bytes, for piping). `apply`
is `sandbox.patch_apply`.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import IO

import anyio.to_thread

from airlock.errors import NotFound
from airlock.policies import Policy
from airlock.sandbox.gitdiff import FileState
from airlock.sandbox.patch_apply import apply_patch
from airlock.store import BlobStore, Database, HatchCopyRecord, PatchRecord
from airlock.tools.context import iso_time
from airlock.tools.models import PATCH_ID

from .config import DRILL_TENANT
from .terminal import safe_block, safe_line, table

_PIECE = 1 << 16


async def load_patch(db: Database, patch_id: str) -> tuple[PatchRecord, HatchCopyRecord]:
    """The patch and the copy it belongs to; NotFound for an unknown id."""
    record = await db.get_patch(patch_id) if PATCH_ID.fullmatch(patch_id) else None
    copy = await db.get_copy(record.copy_id) if record is not None else None
    if record is None or copy is None:
        raise NotFound(f"no patch {patch_id[:64]!r}; patch ids look like pat_... (from get_patch)")
    return record, copy


def write_patch(blobs: BlobStore, record: PatchRecord, out: IO[bytes], *, raw: bool) -> None:
    """The patch text to `out` a piece at a time, never whole in memory: exactly its bytes
    with `raw`, else decoded, made safe (`safe_block`) and without its trailing newlines.
    Blocking."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    held = ""  # trailing newlines of the text so far: written only if more text follows
    with blobs.open_blob(record.sha256) as patch:
        while piece := patch.read(_PIECE):
            if raw:
                out.write(piece)
                continue
            text = safe_block(decoder.decode(piece))
            body = text.rstrip("\n")
            if body:
                out.write((held + body).encode())
                held = text[len(body) :]
            else:
                held += text
    if not raw:
        tail = safe_block(decoder.decode(b"", final=True)).rstrip("\n")
        out.write((held + tail if tail else "").encode() + b"\n")


async def patches_table(
    db: Database, *, session_id: str | None, limit: int, drill: bool = False
) -> str:
    """One line per patch, newest first: where it came from and how much it changes. The
    drill's own patches (`airlock drill` copies a repository in) are not the user's: left
    out unless asked for by `drill` or by their session, and then marked."""
    every = drill or session_id is not None
    records = await db.list_patches(
        session_id=session_id, limit=limit, except_tenant=None if every else DRILL_TENANT
    )
    if not records:
        return "no patches recorded" + ("" if every else " (airlock drill's own: --drill)")
    header = ("PATCH", "COPY", "SESSION", "MADE", "FILES", "NEEDS HUMAN", "REFUSED")
    rows = [
        (
            r.id,
            r.copy_id,
            r.session_id + (" (drill)" if r.tenant == DRILL_TENANT else ""),
            iso_time(r.created_at),
            str(len(r.entries)),
            str(len(r.held_back)),
            str(len(r.refused)),
        )
        for r in records
    ]
    return table(header, rows)


def describe(record: PatchRecord, copy: HatchCopyRecord) -> str:
    """The header `show` prints: where the patch came from, what it changes, what it holds back."""
    lines = [
        f"patch {record.id}  ({record.size} bytes, sha256 {record.sha256})",
        f"from  copy {copy.id} of root {copy.root!r} ({copy.root_path}) into "
        f"/workspace/{copy.dest}",
        f"      session {record.session_id}, tenant {record.tenant}, made "
        f"{iso_time(record.created_at)} from workspace version {record.version}",
    ]
    lines.append("changes:" if record.entries else "changes: none")
    for entry in record.entries:
        name = entry["path"]
        if entry.get("old_path"):
            name = f"{entry['old_path']} -> {name}"
        binary = " (binary)" if entry.get("binary") else ""
        if entry.get("whole"):
            binary += " (lines replaced whole: a shorter diff cost too much)"
        lines.append(f"  {entry['change']:<9} {name}{binary}")
    if record.held_back:
        lines.append("needs a human (protected; not in the patch, make these by hand if wanted):")
        lines.extend(
            f"  {h['change']:<9} {h['path']}  (protected by {h['glob']})" for h in record.held_back
        )
    if record.refused:
        lines.append("refused (names that cannot be written safely; not in the patch):")
        lines.extend(f"  {r['path']!r}: {r['reason']}" for r in record.refused)
    lines.append(f"apply: airlock patch apply {record.id} --to DIR [--check]")
    return "\n".join(safe_line(line) for line in lines)


async def apply(
    db: Database, blobs: BlobStore, policy: Policy, patch_id: str, target: Path, *, check: bool
) -> tuple[str, int]:
    """Apply (or with `check`, try) a patch to `target`; the report and the exit code."""
    record, copy = await load_patch(db, patch_id)
    text = await blobs.read(record.sha256)
    raw = json.loads(await blobs.read(copy.baseline_sha256))
    baseline = {path: FileState(sha256=sha, mode=mode) for path, (sha, mode) in raw.items()}
    listed = {p for e in record.entries for p in (e["path"], e.get("old_path")) if p}
    report = await anyio.to_thread.run_sync(
        lambda: apply_patch(
            text, listed, baseline, target, policy.hatch.protecting_glob, check_only=check
        )
    )
    lines: list[str] = []
    if not report.paths:
        lines.append(f"patch {record.id} changes nothing")
    elif report.already_applied:
        lines.append(
            f"patch {record.id} is already applied to {target} (its files hold the patch's "
            "result); nothing was written"
        )
    elif report.failed:
        lines.append(
            f"refused: {len(report.failed)} file(s) of patch {record.id} do not apply cleanly "
            f"to {target} (it differs from the copy the patch was made against); nothing "
            "was written:"
        )
        lines.extend(f"  {path}: {reason}" for path, reason in report.failed)
    else:
        verb = "applies cleanly to" if check else "applied to"
        lines.append(f"patch {record.id} {verb} {target}: {', '.join(report.paths)}")
    if report.drifted and not report.failed and not report.already_applied:
        lines.append(
            "these differed from the copy's baseline, and their hunks still apply: "
            + ", ".join(report.drifted)
        )
    if record.held_back:
        lines.append(
            "not in the patch, needs a human: "
            + ", ".join(f"{h['path']} ({h['change']})" for h in record.held_back)
        )
    return "\n".join(safe_line(line) for line in lines), 1 if report.failed else 0
