"""The content-addressed blob store: bytes in, sha256 hex name out.

Holds contents only; what a blob is (artifact, workspace file, output) and who may read it
lives in the database. A blob is `root/ab/cdef...`: the first two hex digits of its sha256
name a directory, the other 62 the file. OSError leaves this module as `StoreError`.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

import anyio.to_thread

from airlock.errors import StoreError

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class BlobStore:
    """Immutable blobs under `root`, named by the sha256 of their content."""

    def __init__(self, root: Path) -> None:
        self._root = root

    def path(self, sha256: str) -> Path:
        """Where the blob `sha256` lives; ValueError unless it is 64 lowercase hex digits.

        The check is what keeps a caller-supplied name from reaching any other file.
        """
        if not _SHA256_HEX.fullmatch(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return self._root / sha256[:2] / sha256[2:]

    async def put(self, data: bytes) -> str:
        """Store `data` and return its sha256 hex; storing the same bytes again is a no-op."""
        try:
            return await anyio.to_thread.run_sync(self._put, data)
        except OSError as exc:
            raise StoreError(f"cannot write blob under {self._root}: {exc}") from exc

    def _put(self, data: bytes) -> str:
        sha256 = hashlib.sha256(data).hexdigest()
        target = self.path(sha256)
        if target.is_file():
            return sha256
        # mkdir(parents=True) ignores `mode` for the parents it creates, so make each level.
        self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
        target.parent.mkdir(mode=0o700, exist_ok=True)
        # The temporary file sits in root (same filesystem, so os.replace is atomic) and is
        # created 0600 by mkstemp; readers see the whole blob or none of it.
        fd, tmp = tempfile.mkstemp(dir=self._root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return sha256

    async def read(self, sha256: str, offset: int = 0, length: int | None = None) -> bytes:
        """Up to `length` bytes of the blob from `offset` (to the end if `length` is None).

        A missing blob is a `StoreError`: the database named it, so the store lost it.
        """
        if offset < 0 or (length is not None and length < 0):
            raise ValueError(f"offset and length must be >= 0, not {offset} and {length}")
        path = self.path(sha256)

        def read() -> bytes:
            with path.open("rb") as f:
                f.seek(offset)
                return f.read(-1 if length is None else length)

        try:
            return await anyio.to_thread.run_sync(read)
        except OSError as exc:
            raise StoreError(f"cannot read blob {sha256}: {exc}") from exc

    async def exists(self, sha256: str) -> bool:
        """Whether the blob is stored; ValueError for a malformed name, as `path` does."""
        path = self.path(sha256)
        try:
            return await anyio.to_thread.run_sync(path.is_file)
        except OSError as exc:
            raise StoreError(f"cannot check blob {sha256}: {exc}") from exc
