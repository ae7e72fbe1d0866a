"""Snapshots of hatch roots: a host directory copied (never mounted) into a session.

Runs on the host, inside the server process, against a directory the operator named in
`[hatch.roots]`. The walk holds a file descriptor for every directory on its way down
and opens each entry relative to its parent's descriptor with O_NOFOLLOW; what was
opened is checked again with fstat against what lstat saw. So no symlink, and no entry
swapped for a symlink halfway through, can lead the copy out of the root; a path is
never checked first and opened later. Symlinks, FIFOs, sockets, devices, files with
more than one hard link (another name may lie outside the root), other filesystems
mounted inside the root, `.git` (the root's own always: the copy gets a fresh repository;
nested ones unless the policy opts in) and what the policy excludes (credentials) are
skipped and listed.

Contents go to the content-addressed blob store through the `store` callback, one file
at a time; the snapshot itself is the baseline a later patch is computed against.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from airlock.errors import InvalidRequest, LimitExceeded, UnsafePath
from airlock.policies import matching_glob

from .file_transfer import safe_relative_path

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_NOTES = 50


@dataclass(frozen=True)
class SnapshotFile:
    """A regular file of the root: where it goes, what it holds, how it may be run."""

    path: str
    """Relative to the root, normalized."""
    sha256: str
    size: int
    mode: int
    """0o755 if any execute bit was set on the host, else 0o644 (what git keeps)."""
    mtime: int


@dataclass(frozen=True)
class SnapshotDir:
    """A directory of the root, kept so that empty ones survive the copy."""

    path: str
    mode: int
    mtime: int


@dataclass(frozen=True)
class SnapshotCaps:
    """What one copy may take."""

    max_entries: int
    """Files and directories together."""
    max_bytes: int
    max_path_length: int
    """Longest path the copy may produce, counting the destination prefix."""
    prefix_length: int = 0
    """Length of the destination directory plus its slash, added to every path."""
    include_git_dir: bool = False
    exclude: tuple[str, ...] = ()
    """Globs of paths never copied (credentials); a directory matching one is skipped whole."""


@dataclass
class Snapshot:
    """What a copy took: files and directories (sorted by path), and what it skipped."""

    files: list[SnapshotFile] = field(default_factory=list)
    dirs: list[SnapshotDir] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    skipped_count: int = 0
    total_bytes: int = 0

    def note(self, text: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < _MAX_NOTES:
            self.skipped.append(text)


def take_snapshot(
    root: str, name: str, caps: SnapshotCaps, store: Callable[[bytes], object]
) -> Snapshot:
    """Copy the regular files and directories under `root` into the blob store.

    `name` is the root's policy name, used in messages (the host path never is: the
    agent reads them). Raises `LimitExceeded` naming the cap that was hit, and
    `InvalidRequest` if the root cannot be opened; skips (and lists) everything else
    that is not a plain file or directory.
    """
    snapshot = Snapshot()
    try:
        root_fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise InvalidRequest(
            f"root {name!r} cannot be read on the host ({exc.strerror}); ask the operator "
            "to check [hatch.roots] in the policy"
        ) from exc
    try:
        device = os.fstat(root_fd).st_dev
        _walk(root_fd, "", device, caps, store, snapshot, name)
    finally:
        os.close(root_fd)
    snapshot.files.sort(key=lambda f: f.path)
    snapshot.dirs.sort(key=lambda d: d.path)
    return snapshot


def _walk(
    dir_fd: int,
    prefix: str,
    device: int,
    caps: SnapshotCaps,
    store: Callable[[bytes], object],
    snapshot: Snapshot,
    name: str,
) -> None:
    for entry in sorted(os.listdir(dir_fd)):
        path = prefix + entry
        try:
            safe = safe_relative_path(path, max_length=caps.max_path_length - caps.prefix_length)
        except UnsafePath as exc:
            snapshot.note(f"{path!r}: skipped, the name cannot be copied safely ({exc})")
            continue
        if safe != path:
            snapshot.note(f"{path!r}: skipped, not a normalized name")
            continue
        if entry.casefold() == ".git" and not prefix:
            # The copy gets a repository of its own there (sandbox/gitbase.py).
            snapshot.note(f"{path}: skipped, the copy gets a fresh git repository instead")
            continue
        if entry.casefold() == ".git" and not caps.include_git_dir:
            snapshot.note(f"{path}: skipped, .git is not copied (the policy keeps it out)")
            continue
        glob = matching_glob(caps.exclude, path)
        if glob is not None:
            snapshot.note(f"{path}: skipped, the policy keeps it out of sandboxes ({glob})")
            continue
        try:
            seen = os.lstat(entry, dir_fd=dir_fd)
        except FileNotFoundError:
            continue  # removed while we walked: it is simply not in the snapshot
        if stat.S_ISDIR(seen.st_mode):
            if seen.st_dev != device:
                snapshot.note(f"{path}: skipped, another filesystem is mounted here")
                continue
            _count(snapshot, caps, name)
            with _opened(entry, dir_fd, _DIR_FLAGS, seen, path) as child:
                snapshot.dirs.append(SnapshotDir(path=path, mode=0o755, mtime=int(seen.st_mtime)))
                _walk(child, path + "/", device, caps, store, snapshot, name)
        elif stat.S_ISREG(seen.st_mode):
            if seen.st_nlink > 1:
                snapshot.note(f"{path}: skipped, it has other hard links, maybe outside the root")
                continue
            _count(snapshot, caps, name)
            with _opened(entry, dir_fd, _FILE_FLAGS, seen, path) as fd:
                snapshot.files.append(_copy_file(fd, path, seen, caps, store, snapshot, name))
        elif stat.S_ISLNK(seen.st_mode):
            snapshot.note(f"{path}: skipped, symlinks are never followed or copied")
        else:
            snapshot.note(f"{path}: skipped, not a regular file or directory")


def _count(snapshot: Snapshot, caps: SnapshotCaps, name: str) -> None:
    if len(snapshot.files) + len(snapshot.dirs) >= caps.max_entries:
        raise LimitExceeded(
            f"root {name!r} has more than {caps.max_entries} files and directories, the "
            "policy's [hatch] max_files; ask the operator to raise it or to name a smaller "
            "directory as a root"
        )


@contextmanager
def _opened(entry: str, dir_fd: int, flags: int, seen: os.stat_result, path: str) -> Iterator[int]:
    """`entry` opened under `dir_fd` without following links, and still what lstat saw."""
    try:
        fd = os.open(entry, flags, dir_fd=dir_fd)
    except OSError as exc:
        # ELOOP: it became a symlink; ENOTDIR: it stopped being a directory.
        raise InvalidRequest(
            f"{path}: changed while it was being copied ({exc.strerror}); try again"
        ) from exc
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino, stat.S_IFMT(now.st_mode)) != (
            seen.st_dev,
            seen.st_ino,
            stat.S_IFMT(seen.st_mode),
        ):
            raise InvalidRequest(f"{path}: changed while it was being copied; try again")
        yield fd
    finally:
        os.close(fd)


def _copy_file(
    fd: int,
    path: str,
    seen: os.stat_result,
    caps: SnapshotCaps,
    store: Callable[[bytes], object],
    snapshot: Snapshot,
    name: str,
) -> SnapshotFile:
    room = caps.max_bytes - snapshot.total_bytes
    chunks: list[bytes] = []
    size = 0
    # Read up to one byte past the room left, whatever stat said: the file may grow.
    while size <= room:
        chunk = os.read(fd, min(1 << 20, room + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > room:
        raise LimitExceeded(
            f"root {name!r} holds more than {caps.max_bytes} bytes of files, the policy's "
            "[hatch] max_bytes; ask the operator to raise it or to name a smaller directory"
        )
    data = b"".join(chunks)
    sha256 = hashlib.sha256(data).hexdigest()
    store(data)
    snapshot.total_bytes += size
    mode = 0o755 if seen.st_mode & 0o111 else 0o644
    return SnapshotFile(path=path, sha256=sha256, size=size, mode=mode, mtime=int(seen.st_mtime))
