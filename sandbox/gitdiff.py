"""Patches in git's format: what changed under a copied-in root, as `git apply` reads it.

Pure: a function of the baseline (what the snapshot copied in), the current files and
their contents; no I/O. Every name in the result was chosen by the sandbox, so:

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

Text diffs use full context of 3 lines; binary files (a NUL in the first 8000 bytes, as
git decides, or more than `TEXT_LIMIT` bytes) become `GIT binary patch` literals with
both directions. Index lines carry full 40-digit git blob ids, so `git apply` checks a
binary file's preimage exactly. Renames are detected when the content is identical.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import unicodedata
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from airlock.policies import canonical_segment

TEXT_LIMIT = 1 << 20
"""Files larger than this (bytes) are diffed as binary: a line diff of them would be slow
and no one reviews it line by line."""

_CONTEXT = 3
_BINARY_PROBE = 8000
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
    text: bytes
    entries: tuple[PatchEntry, ...]
    held_back: tuple[HeldBack, ...]
    refused: tuple[Refusal, ...]
    ignored: tuple[str, ...] = ()
    """New files left out because an ignore glob covers them (caches, build output)."""


def build_patch(
    baseline: Mapping[str, FileState],
    current: Mapping[str, FileState],
    content: Callable[[str], bytes],
    protected: Callable[[str], str | None],
    ignored: Callable[[str], bool] = lambda _: False,
) -> GitPatch:
    """The changes from `baseline` to `current` (root-relative paths) as a git patch.

    `content` returns the bytes of a sha256; `protected` returns the glob that holds a
    path back, or None; `ignored` says whether a new file stays out (and is only listed).
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
    sections: list[tuple[str, bytes, PatchEntry]] = []
    for path, change in kept.items():
        if change == "deleted" and path in renames.values():
            continue
        old_path = path
        if change == "added" and path in renames:
            old_path, change = renames[path], "renamed"
        entry, text = _file_diff(
            old_path, path, change, baseline.get(old_path), current.get(path), content
        )
        sections.append((path, text, entry))
    sections.sort(key=lambda s: s[0])
    return GitPatch(
        text=b"".join(text for _, text, _ in sections),
        entries=tuple(entry for _, _, entry in sections),
        held_back=tuple(held_back),
        refused=tuple(refused),
        ignored=tuple(skipped),
    )


def unsafe_name(path: str) -> str | None:
    """Why `path` cannot be named in a patch, or None if it can."""
    if not path or path.startswith("/") or path.endswith("/"):
        return "not a relative file path"
    if any(unicodedata.category(ch)[0] == "C" or ch in "\u2028\u2029" for ch in path):
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


def _file_diff(
    old_path: str,
    new_path: str,
    change: Change,
    old: FileState | None,
    new: FileState | None,
    content: Callable[[str], bytes],
) -> tuple[PatchEntry, bytes]:
    old_name, new_name = quote_name("a/" + old_path), quote_name("b/" + new_path)
    lines = [f"diff --git {old_name} {new_name}"]
    old_data = content(old.sha256) if old is not None else b""
    new_data = content(new.sha256) if new is not None else b""
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
    binary = _is_binary(old_data) or _is_binary(new_data)
    entry = PatchEntry(
        path=new_path,
        change=change,
        old_path=old_path if change == "renamed" else None,
        binary=binary,
    )
    if old_data == new_data and (old is not None and new is not None):
        # A mode change or a pure rename: no index line, no hunks.
        return entry, _join(lines)
    old_id = git_blob_id(old_data) if old is not None else _ZERO_ID
    new_id = git_blob_id(new_data) if new is not None else _ZERO_ID
    index = f"index {old_id}..{new_id}"
    if old is not None and new is not None and _git_mode(old.mode) == _git_mode(new.mode):
        index += f" {_git_mode(new.mode)}"
    lines.append(index)
    if binary:
        lines.append("GIT binary patch")
        body = _binary_hunk(new_data) + _binary_hunk(old_data)
        return entry, _join(lines) + body
    hunks = _text_hunks(old_data, new_data)
    if not hunks:  # an empty file added or deleted
        return entry, _join(lines)
    lines.append(f"--- {old_name}" if old is not None else "--- /dev/null")
    lines.append(f"+++ {new_name}" if new is not None else "+++ /dev/null")
    return entry, _join(lines) + hunks


def _join(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode("ascii")


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[:_BINARY_PROBE] or len(data) > TEXT_LIMIT


def _split_lines(data: bytes) -> list[bytes]:
    """Lines ending in "\\n" (only that ends a line for git); the last may lack it."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _text_hunks(old_data: bytes, new_data: bytes) -> bytes:
    a, b = _split_lines(old_data), _split_lines(new_data)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    out: list[bytes] = []
    for group in matcher.get_grouped_opcodes(_CONTEXT):
        i1, i2 = group[0][1], group[-1][2]
        j1, j2 = group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2 - i1)} +{_range(j1, j2 - j1)} @@\n".encode())
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


def _binary_hunk(data: bytes) -> bytes:
    """One `literal` hunk: zlib-deflated bytes in git's base85 lines of 52 bytes each."""
    deflated = zlib.compress(data, 9)
    out = [f"literal {len(data)}\n".encode()]
    for start in range(0, len(deflated), 52):
        chunk = deflated[start : start + 52]
        size = len(chunk)
        length = chr(ord("A") + size - 1) if size <= 26 else chr(ord("a") + size - 27)
        out.append(length.encode() + base64.b85encode(chunk, pad=True) + b"\n")
    out.append(b"\n")
    return b"".join(out)
