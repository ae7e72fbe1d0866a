"""Where blob bytes live: the seam between the content-addressed blob store and its
storage, and the storage of a single server (files under the data directory).

`BlobStore` (blobs.py) owns naming, hashing, drafts and staging; a `BlobContents` only
keeps bytes under a name it is given, already checked to be 64 lowercase hex digits and
already known to be the sha256 of the bytes. Every method blocks: the store calls them in
worker threads. A fleet keeps its contents where every replica reads them
(`postgres.blobs.PostgresContents`); an object store would be a third implementation of the same
four methods (docs/fleet.md says how).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO, Protocol

from .private import private_dir


class BlobContents(Protocol):
    """Immutable bytes by sha256 name. Blocking; OSError for storage failures."""

    where: str
    """Where the bytes are, for messages (a directory, or a database without password)."""

    def has(self, sha256: str) -> bool:
        """Whether the whole blob is stored (a half-written one never is)."""
        ...

    def write(self, sha256: str, data: bytes) -> None:
        """Store `data` under its name, all or nothing; storing it again is harmless."""
        ...

    def take(self, sha256: str, draft: Path) -> None:
        """Store the draft file's bytes under their name, all or nothing, read a chunk at a
        time; the draft is gone afterwards (moved in, or removed once copied)."""
        ...

    def open(self, sha256: str) -> IO[bytes]:
        """The blob for reading from its start, seekable; FileNotFoundError when missing."""
        ...


class FileContents:
    """One file per blob: `root/ab/cdef...`, directories 0700, files 0600."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = str(root)

    def path(self, sha256: str) -> Path:
        return self.root / sha256[:2] / sha256[2:]

    def has(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def write(self, sha256: str, data: bytes) -> None:
        target = self.path(sha256)
        if target.is_file():
            return
        self._make_dirs(target)
        # The temporary file sits in root (same filesystem, so os.replace is atomic) and is
        # created 0600 by mkstemp; readers see the whole blob or none of it.
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def take(self, sha256: str, draft: Path) -> None:
        target = self.path(sha256)
        if target.is_file():
            # The same content is already stored; the draft is not needed.
            draft.unlink(missing_ok=True)
            return
        self._make_dirs(target)
        os.replace(draft, target)

    def open(self, sha256: str) -> IO[bytes]:
        return self.path(sha256).open("rb")

    def _make_dirs(self, target: Path) -> None:
        private_dir(self.root)
        private_dir(target.parent)
