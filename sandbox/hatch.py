"""The hatch: files into a sandbox and out of it, never trusting what comes out.

In: validated relative paths (directories, even empty ones, and files with their
modes and mtimes) packed into a tar the runner unpacks in /workspace.
Out: the runner's final listing is checked as a tree (plain relative paths, parents
that are directories, only files and directories kept, setuid/setgid/sticky
dropped, a cap on entries); its tar is read member by member, never extracted:
regular files only, caps on count and sizes, and each file's hash must match the
listing. `settle` then decides the content of every listed file, taking from what
came in only what the host itself sent. Nothing here touches the host filesystem.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO

from airlock.errors import UnsafePath
from airlock.store import WorkspaceFile

from .runner import SANDBOX_UID
from .spec import ArtifactCaps, InputDir, InputFile, OutputFile, WorkspaceEntry

# Airlock keeps each run's captured streams under this prefix, so the code's own
# files may not use it.
RESERVED_PREFIX = ".airlock/"
# Permission bits survive; setuid, setgid and sticky never do.
KEPT_MODE_BITS = 0o777


def safe_relative_path(path: str, *, max_length: int = 255) -> str:
    """Normalize `path` to a plain relative POSIX path or raise UnsafePath.

    Rejected: empty, absolute, `..` anywhere, backslashes, NUL and other control
    characters, and anything longer than `max_length`. `./a//b` becomes `a/b`.
    """
    if not path or len(path) > max_length:
        raise UnsafePath(f"path must be 1 to {max_length} characters long, got {len(path)}")
    # Names travel to clients outside the untrusted envelope (as resource links), so
    # nothing invisible or control-like may hide in them: no C0/C1 controls, no
    # format characters (zero-width, bidi, Unicode tags), no line separators.
    if any(unicodedata.category(ch)[0] == "C" or ch in "\u2028\u2029" for ch in path):
        raise UnsafePath(
            f"path {path!r} contains a control or invisible character; use printable names"
        )
    if "<" in path or ">" in path:
        # A name can't pose as envelope markup where it is shown outside the envelope.
        raise UnsafePath(f"path {path!r} contains '<' or '>'; use plain file names")
    if "\\" in path:
        raise UnsafePath(f"path {path!r} contains a backslash; use '/' between directories")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise UnsafePath(
            f"path {path!r} is absolute; give it relative to /workspace, e.g. 'data/in.csv'"
        )
    if ".." in pure.parts:
        raise UnsafePath(f"path {path!r} contains '..'; give a path inside /workspace")
    normalized = str(pure)
    if normalized in ("", "."):
        raise UnsafePath(f"path {path!r} names no file")
    return normalized


def pack_inputs(files: Iterable[InputFile], dirs: Iterable[InputDir] = ()) -> bytes:
    """A tar of `dirs` then `files` (paths already validated), owned by the sandbox user.

    Modes and mtimes go in as given (permission bits only); directories come first,
    parents before children, so the runner's extraction creates them with their modes.
    """
    files = list(files)
    dirs = sorted(dirs, key=lambda d: d.path)
    if not files and not dirs:
        return b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in dirs:
            info = _owned(directory.path, directory.mode, directory.mtime)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for file in files:
            info = _owned(file.path, file.mode, file.mtime)
            info.size = len(file.data)
            tar.addfile(info, io.BytesIO(file.data))
    return buffer.getvalue()


def _owned(path: str, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.mode = mode & KEPT_MODE_BITS
    info.mtime = mtime
    info.uid = info.gid = SANDBOX_UID
    return info


# Notes of one kind (refused names, links, files without content) shown word for word;
# the rest are counted in one line, so a tree of 25,000 links gives a result of a size.
NOTED_PER_KIND = 10


class _Tally:
    """Notes of one kind: the first NOTED_PER_KIND as given, the rest counted."""

    def __init__(self, notes: list[str], more: str) -> None:
        self._notes = notes
        self._more = more
        self._count = 0

    def add(self, text: str) -> None:
        self._count += 1
        if self._count <= NOTED_PER_KIND:
            self._notes.append(text)

    def close(self) -> None:
        if self._count > NOTED_PER_KIND:
            self._notes.append(f"and {self._count - NOTED_PER_KIND} more {self._more}")


def read_listing(
    listing: Sequence[WorkspaceEntry], *, complete: bool, caps: ArtifactCaps
) -> tuple[list[WorkspaceEntry], bool, list[str]]:
    """The runner's final listing checked as a tree: (entries kept, complete, notes).

    Kept: files and directories with a plain, normalized, unreserved path whose parent
    is a kept directory, at most `caps.max_entries` of them, modes cut to permission
    bits. Symlinks, FIFOs, sockets and devices are reported, never kept. Whenever an
    entry that could have been kept is left out, the listing is no longer complete, so
    nothing absent from it is taken as deleted.
    """
    kept: dict[str, WorkspaceEntry] = {}
    notes: list[str] = []
    if not complete:
        notes.append("the runner could not list all of /workspace, so this run deleted nothing")
    seen: set[str] = set()
    problems = _Tally(notes, "entries with a refused path or parent; not kept")
    others = _Tally(notes, "symlinks, FIFOs, sockets or devices; not kept")
    for entry in sorted(listing, key=lambda e: (e.path.count("/"), e.path)):
        problem = _listing_problem(entry, kept, seen)
        seen.add(entry.path)
        if problem is not None:
            problems.add(problem)
            continue
        if entry.kind == "other":
            others.add(
                f"{entry.path}: not a regular file or directory (symlinks, FIFOs, sockets "
                "and devices are not kept)"
            )
            continue
        if len(kept) >= caps.max_entries:
            notes.append(
                f"/workspace holds more than {caps.max_entries} entries; {entry.path} and "
                "the entries after it were not kept, and this run deleted nothing"
            )
            complete = False
            break
        mode = entry.mode & KEPT_MODE_BITS
        if entry.mode & ~KEPT_MODE_BITS:
            notes.append(f"{entry.path}: setuid, setgid and sticky bits are not kept")
        kept[entry.path] = entry.model_copy(update={"mode": mode})
    problems.close()
    others.close()
    return sorted(kept.values(), key=lambda e: e.path), complete, notes


def _listing_problem(
    entry: WorkspaceEntry, kept: Mapping[str, WorkspaceEntry], seen: set[str]
) -> str | None:
    try:
        if safe_relative_path(entry.path) != entry.path:
            return f"{entry.path!r}: not a normalized path; not kept"
    except UnsafePath as exc:
        return f"{entry.path!r}: {exc}; not kept"
    if entry.path in seen:
        return f"{entry.path}: listed twice; not kept"
    if entry.path + "/" == RESERVED_PREFIX or entry.path.startswith(RESERVED_PREFIX):
        return f"{entry.path}: the {RESERVED_PREFIX} directory is reserved for Airlock; not kept"
    parent = str(PurePosixPath(entry.path).parent)
    if parent != "." and (parent not in kept or kept[parent].kind != "dir"):
        return f"{entry.path}: its parent directory was not kept; not kept"
    return None


def read_outputs(
    data: bytes | IO[bytes], listing: Sequence[WorkspaceEntry], caps: ArtifactCaps
) -> tuple[list[OutputFile], list[str]]:
    """Validated file contents from the runner's tar, plus a note for each one refused.

    `data` is the tar, in memory or as a seekable file (read from where it stands).

    A member is kept only if it is a regular file with a safe path, within the
    caps, listed as a file (in the checked listing) with the same size and hash.
    The user's code may have written any of it, so none of that is assumed.
    """
    expected = {entry.path: entry for entry in listing if entry.kind == "file"}
    kept: list[OutputFile] = []
    notes: list[str] = []
    total = 0
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    start = source.tell()
    if not source.read(1):
        return kept, notes
    source.seek(start)
    try:
        with tarfile.open(fileobj=source, mode="r:") as tar:
            for member in tar:
                refusal = _refusal(member, expected, caps, len(kept), total)
                if refusal:
                    notes.append(refusal)
                    continue
                extracted = tar.extractfile(member)
                content = extracted.read() if extracted else b""
                sha = hashlib.sha256(content).hexdigest()
                entry = expected.pop(member.name)
                if sha != entry.sha256 or len(content) != entry.size:
                    notes.append(
                        f"{member.name}: content does not match the reported hash; not kept"
                    )
                    continue
                total += len(content)
                kept.append(OutputFile(path=member.name, data=content, sha256=sha))
    except (tarfile.TarError, EOFError, OSError) as exc:
        notes.append(f"output archive is damaged ({exc}); files after that point were not kept")
    return kept, notes


def _refusal(
    member: tarfile.TarInfo,
    expected: dict[str, WorkspaceEntry],
    caps: ArtifactCaps,
    count: int,
    total: int,
) -> str | None:
    name = member.name
    if not member.isreg():
        return f"{name}: not a regular file; not kept"
    try:
        if safe_relative_path(name) != name:
            return f"{name}: not a normalized path; not kept"
    except UnsafePath as exc:
        return f"{name!r}: {exc}; not kept"
    if name.startswith(RESERVED_PREFIX):
        return f"{name}: the {RESERVED_PREFIX} directory is reserved for Airlock; not kept"
    if name not in expected:
        return f"{name}: not listed as a file (or sent twice); not kept"
    if count >= caps.max_files:
        return f"{name}: over the limit of {caps.max_files} files; not kept"
    if member.size > caps.max_file_bytes:
        limit = caps.max_file_bytes
        return f"{name}: {member.size} bytes is over the per-file limit of {limit}; not kept"
    if total + member.size > caps.max_total_bytes:
        return f"{name}: would exceed the total limit of {caps.max_total_bytes} bytes; not kept"
    return None


@dataclass
class Settled:
    """The final state of /workspace as the host will keep it, with each file's content."""

    entries: list[WorkspaceFile] = field(default_factory=list)
    contents: dict[str, bytes] = field(default_factory=dict)
    """Content by sha256 for every file entry."""
    notes: list[str] = field(default_factory=list)


def settle(
    listing: Sequence[WorkspaceEntry],
    received: Sequence[OutputFile],
    sent: Mapping[str, InputFile],
) -> Settled:
    """Decide what every entry of a checked listing holds.

    A file's content is what the runner sent for it, or what the host sent in at the
    same path when the hash is the same; never a blob named by hash alone (a sandbox
    could name another tenant's). A file whose new content did not come back keeps what
    came in at that path, if anything did; otherwise it is not kept. Either way, a note.
    """
    by_path = {f.path: f for f in received}
    result = Settled()
    stayed = _Tally(
        result.notes, "files whose new content did not come back (earlier version stays)"
    )
    lost = _Tally(result.notes, "files whose content did not come back; not kept")
    for entry in listing:
        if entry.kind == "dir":
            result.entries.append(_workspace_entry(entry))
            continue
        got = by_path.get(entry.path)
        given = sent.get(entry.path)
        if got is not None and got.sha256 == entry.sha256:
            result.contents[got.sha256] = got.data
            result.entries.append(_workspace_entry(entry))
        elif given is not None and hashlib.sha256(given.data).hexdigest() == entry.sha256:
            result.contents[entry.sha256] = given.data
            result.entries.append(_workspace_entry(entry))
        elif given is not None:
            sha = hashlib.sha256(given.data).hexdigest()
            result.contents[sha] = given.data
            result.entries.append(
                WorkspaceFile(
                    path=given.path,
                    sha256=sha,
                    size=len(given.data),
                    mode=given.mode,
                    mtime=given.mtime,
                )
            )
            stayed.add(
                f"{entry.path}: its new content did not come back; the version it had "
                "before this run stays"
            )
        else:
            lost.add(f"{entry.path}: its content did not come back; not kept")
    stayed.close()
    lost.close()
    return result


def _workspace_entry(entry: WorkspaceEntry) -> WorkspaceFile:
    mode = entry.mode & KEPT_MODE_BITS
    if entry.kind == "dir":
        return WorkspaceFile(
            path=entry.path, sha256="", size=0, kind="dir", mode=mode, mtime=entry.mtime
        )
    return WorkspaceFile(
        path=entry.path, sha256=entry.sha256, size=entry.size, mode=mode, mtime=entry.mtime
    )
