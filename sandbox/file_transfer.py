"""The hatch, host side: files into a sandbox and out of it, never trusting what comes out.

In: validated relative paths (directories, even empty ones, and files with their
modes and mtimes) packed into a tar the runner unpacks in /workspace, each file's
content copied from its blob in chunks, never whole.
Out: the runner's final listing is checked as a tree (plain relative paths, parents
that are directories, only files and directories kept, setuid/setgid/sticky
dropped, a cap on entries); its tar is read member by member into drafts, never
extracted (`intake.py`). `settle` then decides the content of every listed file,
taking from what came in only what the host itself sent.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import IO

from airlock.characters import has_invisible
from airlock.errors import UnsafePath
from airlock.store import Draft, WorkspaceFile

from .inside.wire import SANDBOX_UID
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
    if has_invisible(path):
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


def pack_inputs(
    out: IO[bytes],
    files: Iterable[InputFile],
    dirs: Iterable[InputDir],
    open_blob: Callable[[str], IO[bytes]],
) -> int:
    """Write to `out` a tar of `dirs` then `files` (paths already validated), owned by the
    sandbox user, and return its size (0, and nothing written, when there is nothing).

    Each file's content is copied from `open_blob(sha256)` in chunks (tarfile's copy),
    so the tar costs memory of one chunk whatever the workspace holds. Modes and mtimes
    go in as given (permission bits only); directories come first, parents before
    children, so the runner's extraction creates them with their modes. Blocking.
    """
    files = list(files)
    dirs = sorted(dirs, key=lambda d: d.path)
    if not files and not dirs:
        return 0
    start = out.tell()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in dirs:
            info = _owned(directory.path, directory.mode, directory.mtime)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for file in files:
            info = _owned(file.path, file.mode, file.mtime)
            info.size = file.size
            with open_blob(file.sha256) as content:
                tar.addfile(info, content)
    return out.tell() - start


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


@dataclass
class Settled:
    """The final state of /workspace as the host will keep it, with each file's content."""

    entries: list[WorkspaceFile] = field(default_factory=list)
    drafts: dict[str, Draft] = field(default_factory=dict)
    """The draft, by sha256, of every file entry whose content came back from the run;
    the other entries' content is a blob the host sent in."""
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
            result.drafts[got.sha256] = got.blob
            result.entries.append(_workspace_entry(entry))
        elif given is not None and given.sha256 == entry.sha256:
            result.entries.append(_workspace_entry(entry))
        elif given is not None:
            result.entries.append(
                WorkspaceFile(
                    path=given.path,
                    sha256=given.sha256,
                    size=given.size,
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
