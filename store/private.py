"""Private directories and files: how everything in the data dir is made only its owner's.

Belongs here: making a directory, and each missing directory above it, mode 0700 whatever
the umask, and tightening one of Airlock's own that an older Airlock left wider (it made
`instances/` with the umask, 0755 under the usual 022). Every room that keeps files in
the data dir (the database, blobs, instances, the vault) and the egress proxy's run
directories make theirs here, so no place gets its own copy of the rule; and the files
made once and never rewritten (the vault key, the operator token): created whole and
0600, and checked as the owner's alone when read. Not here: what goes in them, nor files
rewritten in place (each writer makes its own 0600: `os.open(..., 0o600)` or `mkstemp`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """`path`, made a directory only its owner may list or enter; returns `path`.

    Each missing level is created 0700 (the freedesktop base-directory rule for a data
    directory's missing parents too), and chmodded after mkdir, since mkdir's mode only
    ever loses bits to the umask. An existing `path` that this user owns and others may
    read or enter is tightened to 0700, with a warning: only call this for directories
    that are Airlock's own. Blocking; an OSError is the caller's to translate.
    """
    try:
        seen = path.stat()
    except FileNotFoundError:
        _make(path)
        return path
    if not stat.S_ISDIR(seen.st_mode):
        raise NotADirectoryError(f"{path} is not a directory")
    mode = stat.S_IMODE(seen.st_mode)
    if mode & 0o077 and seen.st_uid == os.geteuid():
        path.chmod(PRIVATE_DIR_MODE)
        log.warning("%s was mode %04o, readable by others; made it 0700", path, mode)
    return path


def _make(path: Path) -> None:
    if not path.parent.is_dir():
        _make(path.parent)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        # Made meanwhile (another server starting on the same data dir), or a file: check
        # it as any existing one.
        private_dir(path)
        return
    path.chmod(PRIVATE_DIR_MODE)


def create_private_file(path: Path, data: bytes) -> None:
    """Make `path` hold `data`, mode 0600, unless it exists by then. Written in full under a
    temporary name (mkstemp makes it 0600), then linked into place: `link` fails if another
    process made the file meanwhile (that one is then the file), and no reader ever sees
    half of it. Blocking; an OSError is the caller's to translate."""
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def private_file_problem(path: Path, mode: int) -> str | None:
    """Why a file of `mode` at `path` is not its owner's alone, naming the fix; or None."""
    if not stat.S_ISREG(mode):
        return f"{path} is not a regular file; remove it"
    if mode & 0o077:
        return (
            f"{path} is readable or writable by group or others "
            f"(mode {stat.S_IMODE(mode):04o}); run `chmod 600 {path}`"
        )
    return None
