"""The hatch: files into a sandbox and out of it, never trusting what comes out.

In: validated relative paths packed into a tar the runner unpacks in /workspace.
Out: the runner's tar is read member by member, never extracted: regular files
only, plain relative paths, caps on count and sizes, and each file's hash must
match the listing the runner reported. Nothing here touches the host filesystem.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath

from airlock.errors import UnsafePath

from .spec import ArtifactCaps, InputFile, OutputFile, WorkspaceEntry

WORKSPACE_UID = 1000
# Airlock keeps each run's captured streams under this prefix, so the code's own
# files may not use it.
RESERVED_PREFIX = ".airlock/"


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


def pack_inputs(files: Iterable[InputFile]) -> bytes:
    """A tar of `files` (paths already validated), owned by the sandbox user."""
    files = list(files)
    if not files:
        return b""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for file in files:
            info = tarfile.TarInfo(file.path)
            info.size = len(file.data)
            info.mode = 0o644
            info.uid = info.gid = WORKSPACE_UID
            tar.addfile(info, io.BytesIO(file.data))
    return buffer.getvalue()


def read_outputs(
    data: bytes, listing: Sequence[WorkspaceEntry], caps: ArtifactCaps
) -> tuple[list[OutputFile], list[str]]:
    """Validated files from the runner's tar, plus a note for each one refused.

    A member is kept only if it is a regular file with a safe path, within the
    caps, listed as changed by the runner with the same size and hash. The
    runner shares a uid with the user's code, so none of that is assumed.
    """
    expected = {entry.path: entry for entry in listing if entry.changed}
    kept: list[OutputFile] = []
    notes: list[str] = []
    total = 0
    if not data:
        return kept, notes
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
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
    notes.extend(f"{path}: reported as changed but missing from the archive" for path in expected)
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
        return f"{name}: not listed as changed (or sent twice); not kept"
    if count >= caps.max_files:
        return f"{name}: over the limit of {caps.max_files} files; not kept"
    if member.size > caps.max_file_bytes:
        limit = caps.max_file_bytes
        return f"{name}: {member.size} bytes is over the per-file limit of {limit}; not kept"
    if total + member.size > caps.max_total_bytes:
        return f"{name}: would exceed the total limit of {caps.max_total_bytes} bytes; not kept"
    return None
