"""Patches in git's format: what changed under a copied-in root, as `git apply` reads it.

A function of the baseline (what the snapshot copied in), the current files and their
contents, which it reads through `open_blob` a chunk at a time; the patch is written to
a sink as it is made, so neither it nor a binary file is ever whole in memory. Every
name in the result was chosen by the sandbox, so:

- a name that cannot be written safely (control or invisible characters, `..`, empty
  segments, a `.git` segment in any spelling a filesystem might read as `.git`) is
  refused and listed, never written;
- every name that is not plain ASCII letters, digits and `._/+@,=~-` is written in
  git's C-style quotes, so no name can end a header line early or split into two;
- a name matching a protected glob (checked on both sides of a rename) is held back
  and listed for a human;
- contents only ever appear on hunk lines with their one-character prefix and exact
  hunk line counts, or base85-encoded in binary hunks, so no content line can be read
  as a header.

Text diffs (`sandbox.linediff`, whose work has a hard bound: past it a file's changed
middle is given as replaced whole, flagged `whole`) use full context of 3 lines; binary
files (a NUL in the first 8000 bytes, as git decides, or more than `TEXT_LIMIT` bytes)
become `GIT binary patch` literals with both directions. Index lines carry full 40-digit
git blob ids, so `git apply` checks a binary file's preimage exactly. Renames are
detected when the content is identical.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import io
import itertools
import os
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Literal, Protocol

from airlock.characters import has_invisible
from airlock.policies import canonical_segment

from .linediff import Opcode, budget, diff_lines, grouped

FORMAT = "airlock-gitdiff-2"
"""Names what this module writes, for caches of its output: change it when the bytes it
writes for the same input change."""

TEXT_LIMIT = 1 << 20
"""Files larger than this (bytes) are diffed as binary: a line diff of them would be slow
and no one reviews it line by line."""

_CONTEXT = 3
_BINARY_PROBE = 8000
# Bytes read and encoded at a time: base85 holds about 12 times its input in objects.
_CHUNK = 1 << 16
_LINE_BYTES = 52
# zlib's default, as git's: level 9 only searches longer chains, which hostile content
# can make slow, for a few bytes less.
_DEFLATE_LEVEL = 6
_ZERO_ID = "0" * 40
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/+@,=~-")
_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\v": "\\v",
    "\f": "\\f",
    "\r": "\\r",
    '"': '\\"',
    "\\": "\\\\",
}

Change = Literal["added", "modified", "deleted", "renamed"]
Opener = Callable[[str], IO[bytes]]
"""Opens the blob of a sha256 for reading from its start."""


class PatchSink(Protocol):
    """Where a patch is written, piece by piece (a file, a blob store draft)."""

    def write(self, data: bytes, /) -> object: ...


@dataclass(frozen=True)
class FileState:
    """One file on one side of the diff."""

    sha256: str
    mode: int


@dataclass(frozen=True)
class PatchEntry:
    """A file the patch changes."""

    path: str
    change: Change
    old_path: str | None = None
    """The name before a rename."""
    binary: bool = False
    whole: bool = False
    """Its changed lines are given as replaced whole: a shorter diff would have cost more
    than `linediff.budget` allows for a file of its size."""
    work: int = 0
    """Units of work its line diff spent (`sandbox.linediff`)."""


@dataclass(frozen=True)
class HeldBack:
    """A change the patch leaves out because a protected glob covers it."""

    path: str
    change: Change
    glob: str


@dataclass(frozen=True)
class Refusal:
    """A change the patch leaves out because its name cannot be written safely."""

    path: str
    reason: str


@dataclass(frozen=True)
class GitPatch:
    """What a written patch holds (its text went to the sink)."""

    entries: tuple[PatchEntry, ...]
    held_back: tuple[HeldBack, ...]
    refused: tuple[Refusal, ...]
    ignored: tuple[str, ...] = ()
    """New files left out because an ignore glob covers them (caches, build output)."""


def build_patch(
    baseline: Mapping[str, FileState],
    current: Mapping[str, FileState],
    open_blob: Opener,
    out: PatchSink,
    protected: Callable[[str], str | None],
    ignored: Callable[[str], bool] = lambda _: False,
) -> GitPatch:
    """Write the changes from `baseline` to `current` (root-relative paths) to `out` as
    a git patch, file by file in path order.

    `open_blob` opens the content of a sha256; `protected` returns the glob that holds a
    path back, or None; `ignored` says whether a new file stays out (and is only listed).
    Whatever `out.write` raises (a size cap) stops the patch there.
    """
    changes: dict[str, Change] = {}
    for path in sorted(baseline.keys() | current.keys()):
        old, new = baseline.get(path), current.get(path)
        if old is None:
            changes[path] = "added"
        elif new is None:
            changes[path] = "deleted"
        elif old != new:
            changes[path] = "modified"
    refused: list[Refusal] = []
    held_back: list[HeldBack] = []
    skipped: list[str] = []
    kept: dict[str, Change] = {}
    for path, change in changes.items():
        if change == "added" and ignored(path):
            skipped.append(path)
            continue
        reason = unsafe_name(path)
        glob = protected(path)
        if reason is not None:
            refused.append(Refusal(path=path, reason=reason))
        elif glob is not None:
            held_back.append(HeldBack(path=path, change=change, glob=glob))
        else:
            kept[path] = change
    renames = _exact_renames(baseline, current, kept)
    entries: list[PatchEntry] = []
    for path, change in kept.items():  # in path order, as git writes a patch
        if change == "deleted" and path in renames.values():
            continue
        old_path = path
        if change == "added" and path in renames:
            old_path, change = renames[path], "renamed"
        entries.append(
            _write_file(
                out, open_blob, old_path, path, change, baseline.get(old_path), current.get(path)
            )
        )
    return GitPatch(
        entries=tuple(entries),
        held_back=tuple(held_back),
        refused=tuple(refused),
        ignored=tuple(skipped),
    )


def unsafe_name(path: str) -> str | None:
    """Why `path` cannot be named in a patch, or None if it can."""
    if not path or path.startswith("/") or path.endswith("/"):
        return "not a relative file path"
    if has_invisible(path):
        return "contains a control or invisible character"
    if "\\" in path:
        return "contains a backslash, which some systems read as a directory separator"
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            return 'has an empty, "." or ".." segment'
        # NTFS and HFS+ ignore case and trailing dots and spaces, NTFS reads a colon as
        # a data stream, and its 8.3 name aliases too.
        if canonical_segment(segment) in (".git", "git~1"):
            return "is inside .git, which is read-only: its changes never leave in a patch"
    return None


def git_blob_id(data: bytes) -> str:
    """The id git gives a blob with this content (SHA-1 of a `blob <size>` header and it)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def quote_name(name: str) -> str:
    """`name` as git writes it in a header: bare if plain, else in C-style quotes.

    Bytes outside ASCII become octal escapes, as git does by default, so every header
    line is ASCII. Spaces are quoted too, which git reads back the same way.
    """
    if all(ch in _PLAIN for ch in name):
        return name
    parts = []
    for byte in name.encode("utf-8", "surrogateescape"):
        ch = chr(byte)
        if ch in _ESCAPES:
            parts.append(_ESCAPES[ch])
        elif byte < 0x20 or byte >= 0x7F:
            parts.append(f"\\{byte:03o}")
        else:
            parts.append(ch)
    return '"' + "".join(parts) + '"'


def _exact_renames(
    baseline: Mapping[str, FileState], current: Mapping[str, FileState], kept: dict[str, Change]
) -> dict[str, str]:
    """new path -> old path, for added files whose content equals a deleted one's."""
    deleted: dict[str, list[str]] = {}
    for path, change in kept.items():
        if change == "deleted":
            deleted.setdefault(baseline[path].sha256, []).append(path)
    renames: dict[str, str] = {}
    for path, change in kept.items():
        if change == "added":
            sources = deleted.get(current[path].sha256)
            if sources:
                renames[path] = sources.pop(0)
    return renames


def _git_mode(mode: int) -> str:
    return "100755" if mode & 0o111 else "100644"


def _write_file(
    out: PatchSink,
    open_blob: Opener,
    old_path: str,
    new_path: str,
    change: Change,
    old: FileState | None,
    new: FileState | None,
) -> PatchEntry:
    old_name, new_name = quote_name("a/" + old_path), quote_name("b/" + new_path)
    lines = [f"diff --git {old_name} {new_name}"]
    if change == "added":
        assert new is not None
        lines.append(f"new file mode {_git_mode(new.mode)}")
    elif change == "deleted":
        assert old is not None
        lines.append(f"deleted file mode {_git_mode(old.mode)}")
    else:
        assert old is not None and new is not None
        if _git_mode(old.mode) != _git_mode(new.mode):
            lines += [f"old mode {_git_mode(old.mode)}", f"new mode {_git_mode(new.mode)}"]
        if change == "renamed":
            lines += [
                "similarity index 100%",
                f"rename from {quote_name(old_path)}",
                f"rename to {quote_name(new_path)}",
            ]
    binary = _is_binary(open_blob, old) or _is_binary(open_blob, new)
    entry = PatchEntry(
        path=new_path,
        change=change,
        old_path=old_path if change == "renamed" else None,
        binary=binary,
    )
    if old is not None and new is not None and old.sha256 == new.sha256:
        # A mode change or a pure rename: no index line, no hunks.
        out.write(_join(lines))
        return entry
    if binary:
        lines.append(_index(old, new, _git_id(open_blob, old), _git_id(open_blob, new)))
        lines.append("GIT binary patch")
        out.write(_join(lines))
        _write_literal(out, open_blob, new)
        _write_literal(out, open_blob, old)
        return entry
    old_data, new_data = _read_text(open_blob, old), _read_text(open_blob, new)
    lines.append(_index(old, new, _data_id(old, old_data), _data_id(new, new_data)))
    a, b = _split_lines(old_data), _split_lines(new_data)
    found = diff_lines(a, b, budget(len(old_data), len(new_data)))
    entry = dataclasses.replace(entry, whole=found.whole, work=found.work)
    hunks = grouped(found.opcodes, _CONTEXT)
    first = next(hunks, None)
    if first is None:  # an empty file added or deleted
        out.write(_join(lines))
        return entry
    lines.append(f"--- {old_name}" if old is not None else "--- /dev/null")
    lines.append(f"+++ {new_name}" if new is not None else "+++ /dev/null")
    out.write(_join(lines))
    for group in itertools.chain([first], hunks):
        out.write(_hunk(group, a, b))
    return entry


def _index(old: FileState | None, new: FileState | None, old_id: str, new_id: str) -> str:
    index = f"index {old_id}..{new_id}"
    if old is not None and new is not None and _git_mode(old.mode) == _git_mode(new.mode):
        index += f" {_git_mode(new.mode)}"
    return index


def _join(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("ascii")


def _is_binary(open_blob: Opener, state: FileState | None) -> bool:
    if state is None:
        return False
    with open_blob(state.sha256) as f:
        head = f.read(_BINARY_PROBE)
        size = f.seek(0, os.SEEK_END)
    return b"\0" in head or size > TEXT_LIMIT


def _read_text(open_blob: Opener, state: FileState | None) -> bytes:
    """The whole of a text file: at most `TEXT_LIMIT` bytes, as `_is_binary` checked."""
    if state is None:
        return b""
    with open_blob(state.sha256) as f:
        return f.read(TEXT_LIMIT + 1)


def _data_id(state: FileState | None, data: bytes) -> str:
    return git_blob_id(data) if state is not None else _ZERO_ID


def _git_id(open_blob: Opener, state: FileState | None) -> str:
    """`git_blob_id` of a blob read in chunks: the size first, as git's header needs it."""
    if state is None:
        return _ZERO_ID
    with open_blob(state.sha256) as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _split_lines(data: bytes) -> list[bytes]:
    """Lines ending in "\\n" (only that ends a line for git); the last may lack it."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _hunk(group: list[Opcode], a: list[bytes], b: list[bytes]) -> bytes:
    i1, i2 = group[0][1], group[-1][2]
    j1, j2 = group[0][3], group[-1][4]
    out = [f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n".encode()]
    for tag, a1, a2, b1, b2 in group:
        if tag == "equal":
            out.extend(_hunk_line(b" ", line) for line in a[a1:a2])
            continue
        out.extend(_hunk_line(b"-", line) for line in a[a1:a2])
        out.extend(_hunk_line(b"+", line) for line in b[b1:b2])
    return b"".join(out)


def _range(start: int, length: int) -> str:
    if length == 1:
        return str(start + 1)
    return f"{start + 1 if length else start},{length}"


def _hunk_line(prefix: bytes, line: bytes) -> bytes:
    if line.endswith(b"\n"):
        return prefix + line
    return prefix + line + b"\n\\ No newline at end of file\n"


def _write_literal(out: PatchSink, open_blob: Opener, state: FileState | None) -> None:
    """One `literal` hunk of a blob (none: empty), deflated and base85-encoded as it is
    read, `_CHUNK` bytes at a time: git's lines of 52 deflated bytes each."""
    deflate = zlib.compressobj(_DEFLATE_LEVEL)
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(open_blob(state.sha256)) if state is not None else io.BytesIO()
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        out.write(b"literal %d\n" % size)
        pending = b""
        while chunk := f.read(_CHUNK):
            pending += deflate.compress(chunk)
            whole = len(pending) - len(pending) % _LINE_BYTES
            if whole:
                out.write(_base85_lines(pending[:whole]))
                pending = pending[whole:]
    out.write(_base85_lines(pending + deflate.flush()) + b"\n")


def _base85_lines(data: bytes) -> bytes:
    """`data` in git's base85 lines: a length letter, then each 4 bytes as 5 characters.

    52 is a multiple of 4, so one encoding of all of `data` splits into whole lines; only
    the last may be short, and padding it to 4 bytes is what git does for every line."""
    encoded = base64.b85encode(data, pad=True)
    lines = []
    for start in range(0, len(data), _LINE_BYTES):
        size = min(_LINE_BYTES, len(data) - start)
        letter = chr(ord("A") + size - 1) if size <= 26 else chr(ord("a") + size - 27)
        first = start // 4 * 5
        lines.append(letter.encode() + encoded[first : first + (size + 3) // 4 * 5] + b"\n")
    return b"".join(lines)
