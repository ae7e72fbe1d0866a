"""The sandbox's own git repository of a copy: `.git` written by the host, in Python.

A copied-in root arrives with a fresh repository at `<to>/.git` whose one commit (on
`main`, also tagged `airlock-base`) is exactly the snapshot `get_patch` diffs against, so
`git status`, `git diff` and `git log` in the sandbox see what the patch will carry.
Nothing of the host's repository is used: no objects, hooks, config, remotes or refs,
and no git program runs on the host. This module writes the objects (one packfile and
its index), the staging index, refs and a config of safe defaults as plain bytes; the
caller stores them as ordinary workspace files, so they persist between runs like the
agent's own work, its commits and stashes included.

The repository is the sandbox's, and everything in it the sandbox may rewrite: the host
never reads it back. `get_patch` compares the workspace with the snapshot and leaves the
copy's `.git` out (`in_repository`); a run's artifacts and changes lists leave every
`.git` directory out (`is_repository_internal`), while the workspace keeps it.

Pure: a function of the snapshot's files and a callback giving each file's bytes.

Written here rather than with dulwich (weighed in issue 30): the host only writes a
repository and never reads one, so what a library offers against hostile repositories
(parsing) is not needed here; the three formats written (a pack of whole objects, its
index, the staging index) take a hundred lines that test_gitbase checks with `git fsck
--strict`, and dulwich would hold every object in memory as this does, behind a dependency.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .gitdiff import unsafe_name
from .snapshot import SnapshotFile

GIT_DIR = ".git"
BRANCH = "main"
BASE_TAG = "airlock-base"
# The image's /etc/gitconfig names the same author; the repository names it too, so a
# policy's own image without that file still commits.
AUTHOR_NAME = "Airlock sandbox"
AUTHOR_EMAIL = "sandbox@airlock.invalid"

# zlib's default level: the pack is written once per copy but shipped into every run, so
# its size counts more than its time (source text: 28 % at 6, 32 % at 1 in half the time).
_LEVEL = 6
_COMMIT, _TREE, _BLOB = 1, 2, 3
_KIND_NAMES = {_COMMIT: b"commit", _TREE: b"tree", _BLOB: b"blob"}
_DIR_MODE = b"40000"

CONFIG = f"""\
# Written by Airlock for this copy; nothing in this repository came from the host's.
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
\t# The hatch restores each file's size and whole-second mtime, never its inode,
\t# ctime or owner: compare only those, so git need not hash every file every run.
\tcheckStat = minimal
\ttrustctime = false
[user]
\tname = {AUTHOR_NAME}
\temail = {AUTHOR_EMAIL}
[gc]
\t# The runner kills every process of the code when it exits: gc must finish first.
\tautoDetach = false
""".encode()

# Highest precedence: the copy's own .gitattributes cannot convert line endings or run
# filters, so git hashes and diffs the bytes as they are, as get_patch does.
ATTRIBUTES = b"* -text -ident -filter -working-tree-encoding\n"


@dataclass(frozen=True)
class RepoFile:
    """One file of the repository, relative to the copy's directory (`.git/...`)."""

    path: str
    data: bytes
    mode: int


@dataclass(frozen=True)
class BaseRepository:
    """What `build_base` wrote: the files and directories of `.git`, and the commit."""

    files: tuple[RepoFile, ...]
    dirs: tuple[str, ...]
    """Every directory of `.git`, parents first, `.git` itself included."""
    commit: str
    """The base commit's id (40 hex digits)."""
    tracked: int
    """How many of the snapshot's files the base commit holds."""

    @property
    def total_bytes(self) -> int:
        return sum(len(f.data) for f in self.files)


def in_repository(path: str) -> bool:
    """Whether a path relative to a copy's directory is inside the copy's own `.git`."""
    return path == GIT_DIR or path.startswith(GIT_DIR + "/")


def is_repository_internal(path: str) -> bool:
    """Whether a workspace path lies in a `.git` directory (a repository's internals, not
    work: left out of a run's artifacts and changes lists, though the workspace keeps it)."""
    return GIT_DIR in path.split("/")


def build_base(
    files: Sequence[SnapshotFile],
    content: Callable[[str], bytes],
    *,
    ignore: Iterable[str],
    message: str,
    when: int,
) -> BaseRepository:
    """The repository whose one commit holds `files` (a snapshot's).

    `content` returns the bytes of a sha256; `ignore` is the policy's globs of new files
    a patch leaves out, written to `info/exclude` so `git status` leaves them out too;
    `message` and `when` (seconds) make the commit. A file whose name a patch could never
    carry (`unsafe_name`: a `.git` segment, control characters) stays out of the commit,
    as it stays out of every patch.
    """
    pack = _Pack()
    blob_ids: dict[str, bytes] = {}
    tracked = [f for f in files if unsafe_name(f.path) is None]
    for f in tracked:
        if f.sha256 not in blob_ids:
            blob_ids[f.sha256] = pack.add(_BLOB, content(f.sha256))
    tree = _write_trees(pack, [(f.path, f.mode, blob_ids[f.sha256]) for f in tracked])
    stamp = f"{AUTHOR_NAME} <{AUTHOR_EMAIL}> {when} +0000"
    commit = pack.add(
        _COMMIT,
        f"tree {tree.hex()}\nauthor {stamp}\ncommitter {stamp}\n\n{message}\n".encode(),
    )
    pack_data, idx_data, name = pack.finish()
    ref = commit.hex().encode() + b"\n"
    excluded = "".join(_exclude_line(glob) for glob in ignore)
    written = (
        RepoFile("HEAD", f"ref: refs/heads/{BRANCH}\n".encode(), 0o644),
        RepoFile("config", CONFIG, 0o644),
        RepoFile("info/attributes", ATTRIBUTES, 0o644),
        RepoFile("info/exclude", excluded.encode(), 0o644),
        RepoFile(f"refs/heads/{BRANCH}", ref, 0o644),
        RepoFile(f"refs/tags/{BASE_TAG}", ref, 0o644),
        # Read-only, as git leaves its packs.
        RepoFile(f"objects/pack/pack-{name}.pack", pack_data, 0o444),
        RepoFile(f"objects/pack/pack-{name}.idx", idx_data, 0o444),
        RepoFile("index", _index(tracked, blob_ids), 0o644),
    )
    dirs = ("", "info", "objects", "objects/pack", "refs", "refs/heads", "refs/tags")
    return BaseRepository(
        files=tuple(
            RepoFile(f"{GIT_DIR}/{f.path}", f.data, f.mode)
            for f in sorted(written, key=lambda f: f.path)
        ),
        dirs=tuple(f"{GIT_DIR}/{d}".rstrip("/") for d in dirs),
        commit=commit.hex(),
        tracked=len(tracked),
    )


def _exclude_line(glob: str) -> str:
    # Policy globs are relative to the root, so anchor each with "/"; they hold no
    # backslash, bracket or brace (policies/globs.py), so only trailing spaces need care.
    stripped = glob.rstrip(" ")
    return "/" + stripped + "\\ " * (len(glob) - len(stripped)) + "\n"


@dataclass
class _Dir:
    files: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    dirs: dict[str, _Dir] = field(default_factory=dict)


def _write_trees(pack: _Pack, entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    """Add the tree objects of `entries` (path, mode, blob id) to `pack`; the root's id."""
    root = _Dir()
    for path, mode, blob in entries:
        *parents, name = path.split("/")
        node = root
        for part in parents:
            node = node.dirs.setdefault(part, _Dir())
        node.files[name] = (mode, blob)
    return _write_tree(pack, root)


def _write_tree(pack: _Pack, node: _Dir) -> bytes:
    # git orders a tree's entries by name, a directory's name as if it ended in "/".
    items: list[tuple[bytes, bytes, bytes]] = []
    for name, (mode, blob) in node.files.items():
        items.append((name.encode(), b"100755" if mode & 0o111 else b"100644", blob))
    for name, child in node.dirs.items():
        items.append((name.encode() + b"/", _DIR_MODE, _write_tree(pack, child)))
    items.sort(key=lambda item: item[0])
    body = b"".join(mode + b" " + key.rstrip(b"/") + b"\0" + oid for key, mode, oid in items)
    return pack.add(_TREE, body)


class _Pack:
    """A version 2 packfile of whole (undeltified) objects, and its version 2 index."""

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 12  # the header, written last
        self._objects: dict[bytes, tuple[int, int]] = {}
        """object id -> (offset, crc32 of its packed bytes)"""

    def add(self, kind: int, data: bytes) -> bytes:
        """Add an object (once per id); its 20-byte id."""
        oid = hashlib.sha1(
            _KIND_NAMES[kind] + b" %d\0" % len(data) + data, usedforsecurity=False
        ).digest()
        if oid in self._objects:
            return oid
        size = len(data)
        header = bytearray([(kind << 4) | (size & 0x0F)])
        size >>= 4
        while size:
            header[-1] |= 0x80
            header.append(size & 0x7F)
            size >>= 7
        packed = bytes(header) + zlib.compress(data, _LEVEL)
        self._objects[oid] = (self._size, zlib.crc32(packed))
        self._chunks.append(packed)
        self._size += len(packed)
        return oid

    def finish(self) -> tuple[bytes, bytes, str]:
        """(pack, index, name): the name is the pack's checksum, as git names its packs."""
        body = b"PACK" + struct.pack(">II", 2, len(self._objects)) + b"".join(self._chunks)
        checksum = hashlib.sha1(body, usedforsecurity=False).digest()
        ids = sorted(self._objects)
        fanout = [0] * 256
        for oid in ids:
            fanout[oid[0]] += 1
        for i in range(1, 256):
            fanout[i] += fanout[i - 1]
        small: list[int] = []
        large: list[int] = []
        for oid in ids:
            offset = self._objects[oid][0]
            if offset < 1 << 31:
                small.append(offset)
            else:  # a pack over 2 GiB: the offset lives in the 64-bit table
                small.append(1 << 31 | len(large))
                large.append(offset)
        index = b"".join(
            (
                b"\377tOc" + struct.pack(">I", 2),
                struct.pack(">256I", *fanout),
                *ids,
                struct.pack(f">{len(ids)}I", *(self._objects[oid][1] for oid in ids)),
                struct.pack(f">{len(small)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                checksum,
            )
        )
        index += hashlib.sha1(index, usedforsecurity=False).digest()
        return body + checksum, index, checksum.hex()


def _index(files: Sequence[SnapshotFile], blob_ids: dict[str, bytes]) -> bytes:
    """A version 2 staging index holding every file as the base commit has it.

    Its stat data is what the sandbox will see (size, whole-second mtime; the rest 0,
    which `checkStat = minimal` ignores), so a first `git status` hashes nothing.
    """
    entries = sorted(files, key=lambda f: f.path.encode())
    out = [b"DIRC" + struct.pack(">II", 2, len(entries))]
    for f in entries:
        name = f.path.encode()
        mode = 0o100755 if f.mode & 0o111 else 0o100644
        mtime = f.mtime & 0xFFFFFFFF
        stat = struct.pack(">10I", mtime, 0, mtime, 0, 0, 0, mode, 0, 0, f.size & 0xFFFFFFFF)
        entry = stat + blob_ids[f.sha256] + struct.pack(">H", min(len(name), 0xFFF)) + name
        out.append(entry + b"\0" * (8 - len(entry) % 8))
    body = b"".join(out)
    return body + hashlib.sha1(body, usedforsecurity=False).digest()
