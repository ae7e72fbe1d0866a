"""What a box sends back after a job: the listing of /workspace and the content of its
changed files (TAR frames), then RESULT; or FAULT when the entrypoint failed.

The runner and the browser driver both end each job here (`send_result`), so the listing,
its caps and the report's shape have one owner; the frames' kinds are wire.py's.

The listing is the whole final /workspace, parents before children, up to the job's
`max_entries` (RESULT's `listing_complete` is false past it, or when a directory or
file could not be read). An entry is a JSON object with `path`, `kind` ("file",
"dir", "other": symlinks, FIFOs, sockets, devices), `size` and `sha256` (files; 0
and "" otherwise), `mode` (`st_mode & 0o7777`), `mtime` (whole seconds) and, for
files, `changed` (content differs from what came in) and, for directories,
`contents_listed` (false: unreadable, nothing under it is known); readers ignore keys they do
not know, so the listing can grow. Content is sent (TAR) for changed files within
the caps, files inside `.git` directories last (a repository's objects never crowd the
work out of the caps); a file listed without content was refused by a cap (a note says
which).

Only the standard library of the image's Python (3.11) may be used here.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

from .privileges import as_sandbox_user
from .wire import ENTRIES, FAULT, MAX_FRAME, NOTES, RESULT, TAR, WORKSPACE, encode_frame

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any, BinaryIO

READ_CHUNK = 65536
# Notes beyond this many (or this many characters) are counted per reason, not listed
# ("and 24488 more: ..."); small enough that the host's caps keep the summary lines.
MAX_NOTES = 20
MAX_NOTES_CHARS = 8 * 1024
MAX_NOTE_CHARS = 600
# Entries are sent in batches of at most this many JSON bytes (well below MAX_FRAME).
ENTRY_BATCH_BYTES = 256 * 1024


def send_result(
    report: dict[str, Any], caps: dict[str, int], before: dict[str, str], out: BinaryIO
) -> None:
    """The job's files (listing and tar, with `before` the hashes of what the host sent),
    then its RESULT. Copying out while something of the code's still runs would let it
    race us, and reach us while we act as the sandbox user: without a clean stop
    (`report["stopped"]`) nothing is listed and the workspace stays as the host has it."""
    listed = None
    if report.pop("stopped"):
        with as_sandbox_user():
            listed = _pack_workspace(before, caps, out)
    report["listing_complete"] = bool(listed and listed.pop("complete"))
    report["listing"] = listed
    out.write(encode_frame(RESULT, json.dumps(report).encode()))
    out.flush()


def send_fault(exc: Exception, out: BinaryIO) -> None:
    """Tell the host why the entrypoint failed (it needs to hear about every failure)."""
    out.write(encode_frame(FAULT, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()))
    out.flush()


class _FrameWriter:
    """A write-only file object that turns writes into frames of one kind."""

    def __init__(self, out: BinaryIO, kind: bytes) -> None:
        self._out = out
        self._kind = kind

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        for start in range(0, len(view), MAX_FRAME):
            self._out.write(encode_frame(self._kind, bytes(view[start : start + MAX_FRAME])))
        return len(data)

    def flush(self) -> None:
        self._out.flush()


class _Listing:
    """Sends workspace entries in batches and notes up to MAX_NOTES, then counts."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self.entries = 0
        self.notes = 0
        self.complete = True
        self.unread_dirs: set[str] = set()
        self._chars = 0
        self._unlisted: dict[str, int] = {}

    def entry(self, entry: dict[str, Any]) -> None:
        encoded = json.dumps(entry).encode()
        if self._batch and self._batch_bytes + len(encoded) > ENTRY_BATCH_BYTES:
            self._flush_entries()
        self._batch.append(encoded)
        self._batch_bytes += len(encoded) + 1
        self.entries += 1

    def note(self, reason: str, text: str) -> None:
        text = text[:MAX_NOTE_CHARS]
        if self.notes < MAX_NOTES and self._chars + len(text) <= MAX_NOTES_CHARS:
            self._chars += len(text)
            self._send_notes([text])
        else:
            self._unlisted[reason] = self._unlisted.get(reason, 0) + 1

    def summary(self, text: str) -> None:
        """A note that is always sent, whatever the cap: it stands for many entries."""
        self._send_notes([text])

    def close(self) -> None:
        self._flush_entries()
        self._send_notes([f"and {n} more: {reason}" for reason, n in self._unlisted.items()])

    def _send_notes(self, texts: list[str]) -> None:
        if texts:
            self._out.write(encode_frame(NOTES, json.dumps(texts).encode()))
            self.notes += len(texts)

    def _flush_entries(self) -> None:
        if self._batch:
            self._out.write(encode_frame(ENTRIES, b"[" + b",".join(self._batch) + b"]"))
            self._batch = []
            self._batch_bytes = 0


def _hash_file(full: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(READ_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(listing: _Listing) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under /workspace (never following a symlink), parents before children.

    A directory that cannot be read anyway makes the listing incomplete.
    """

    def unreadable(exc: OSError) -> None:
        # Directories are checked before they are listed (contents_listed); one that
        # still fails here (or /workspace itself) leaves the whole listing incomplete.
        if os.path.relpath(str(exc.filename), WORKSPACE) not in listing.unread_dirs:
            listing.complete = False

    for root, dirs, files in os.walk(WORKSPACE, onerror=unreadable, followlinks=False):
        dirs.sort()
        for name in sorted([*files, *dirs]):
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            yield os.path.relpath(full, WORKSPACE), st


def _listed(rel: str, st: os.stat_result) -> dict[str, Any]:
    """One listing entry as the host reads it (see sandbox/spec.py WorkspaceEntry)."""
    if stat.S_ISREG(st.st_mode):
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    else:
        kind = "other"
    return {
        "path": rel,
        "kind": kind,
        "size": st.st_size if kind == "file" else 0,
        "sha256": "",
        "mode": stat.S_IMODE(st.st_mode),
        "mtime": int(st.st_mtime),
        "contents_listed": True,
    }


def _pack_workspace(before: dict[str, str], caps: dict[str, int], out: BinaryIO) -> dict[str, Any]:
    """List every entry of /workspace; send the content of new or changed regular files.

    Runs as the sandbox user after every process of the code is gone. A file whose
    content is not sent (a cap) stays listed, so the host does not take it as deleted.
    Returns how many entries and notes were sent and whether the listing is complete,
    for the runner's RESULT.
    """
    import tarfile

    listing = _Listing(out)
    max_entries = int(caps.get("max_entries", 10_000))
    unlisted = 0
    sent = [0, 0]  # files, bytes
    # A repository's internals (git's objects and index) are sent after everything else,
    # so its objects never take the caps' room from the work itself.
    internals: list[tuple[str, os.stat_result, dict[str, Any]]] = []
    writer = _FrameWriter(out, TAR)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
        for rel, st in _entries(listing):
            if listing.entries >= max_entries:
                unlisted += 1
                continue
            entry = _listed(rel, st)
            full = os.path.join(WORKSPACE, rel)
            if entry["kind"] == "file":
                try:
                    entry["sha256"] = _hash_file(full)
                except OSError as exc:
                    # Still listed (it exists), with no hash: the host keeps what it had.
                    listing.note(
                        "unreadable files (content not sent)",
                        f"{rel}: unreadable ({exc.strerror}); its content was not sent",
                    )
                entry["changed"] = entry["sha256"] not in ("", before.get(rel))
            elif entry["kind"] == "dir" and not os.access(full, os.R_OK | os.X_OK):
                # Its contents cannot be listed: the host takes nothing under it as deleted.
                entry["contents_listed"] = False
                listing.unread_dirs.add(rel)
                listing.note(
                    "unreadable directories (contents not listed)",
                    f"{rel}: unreadable directory; its contents are not listed",
                )
            listing.entry(entry)
            if not entry.get("changed"):
                continue
            if ".git" in rel.split("/"):
                internals.append((rel, st, entry))
                continue
            _send_file(tar, listing, rel, st, entry, caps, sent)
        for rel, st, entry in internals:
            _send_file(tar, listing, rel, st, entry, caps, sent)
    if unlisted:
        listing.complete = False
        listing.summary(
            f"/workspace holds more than {max_entries} entries; {unlisted} were not listed, "
            "so this run deleted nothing"
        )
    listing.close()
    out.flush()
    return {"entries": listing.entries, "notes": listing.notes, "complete": listing.complete}


def _send_file(
    tar: Any,
    listing: _Listing,
    rel: str,
    st: os.stat_result,
    entry: dict[str, Any],
    caps: dict[str, int],
    sent: list[int],
) -> None:
    """Add a changed file's content to the outgoing tar, or note the cap that refused it."""
    import tarfile

    refusal = _send_refusal(st.st_size, caps, sent[0], sent[1])
    if refusal:
        listing.note(refusal, f"{rel}: {refusal}")
        return
    info = tarfile.TarInfo(rel)
    info.size = st.st_size
    info.mode = entry["mode"] & 0o777
    info.mtime = entry["mtime"]
    fd = os.open(os.path.join(WORKSPACE, rel), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        tar.addfile(info, f)
    sent[0] += 1
    sent[1] += st.st_size


def _send_refusal(size: int, caps: dict[str, int], sent_files: int, sent_bytes: int) -> str | None:
    """Why a changed file's content is not sent (the reason doubles as its summary line)."""
    if sent_files >= caps["max_files"]:
        return f"content not sent: over the limit of {caps['max_files']} files"
    if size > caps["max_file_bytes"]:
        return f"content not sent: over the per-file limit of {caps['max_file_bytes']} bytes"
    if sent_bytes + size > caps["max_total_bytes"]:
        return f"content not sent: over the total limit of {caps['max_total_bytes']} bytes"
    return None
