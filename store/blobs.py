"""The content-addressed blob store: bytes in, sha256 hex name out.

Holds contents only; what a blob is (artifact, workspace file, output) and who may read it
lives in the database. Where the bytes are kept is a `BlobContents` (blob_contents.py):
files by default, `root/ab/cdef...` (the first two hex digits of its sha256 name a
directory, the other 62 the file), or the fleet's PostgreSQL (postgres/blobs.py). OSError leaves
this module as `StoreError`.

Content too large to hold in memory (what a run leaves behind) comes in through a
`Staging` area: a private directory in the root where each file is written as a draft,
hashed chunk by chunk as it is written. A draft is no blob: nothing is visible under its
hash until `Staging.keep` moves it in (atomically, same filesystem), and leaving the
staging context removes every draft that was not kept, whatever ended the run.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict

from airlock.errors import StoreError

from .blob_contents import BlobContents, FileContents
from .private import private_dir

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_DRAFT_PREFIX = "draft-"
STAGING_PREFIX = ".staging-"


class BlobStore:
    """Immutable blobs named by the sha256 of their content, kept by `contents` (files
    under `root` unless told otherwise); drafts are staged under `root` either way."""

    def __init__(
        self, root: Path, *, owner: str = "", contents: BlobContents | None = None
    ) -> None:
        self._root = root
        # The server instance whose runs stage here: the name of its staging directories,
        # so that those a dead server left can be told from a live one's.
        self._owner = owner
        self.contents = contents if contents is not None else FileContents(root)

    def path(self, sha256: str) -> Path:
        """Where the blob `sha256` lives when its contents are files; ValueError unless it
        is 64 lowercase hex digits (the check that keeps a caller-supplied name from
        reaching any other file)."""
        if not isinstance(self.contents, FileContents):
            raise StoreError(f"blobs are kept in {self.contents.where}, not in files")
        return self.contents.path(_checked(sha256))

    async def put(self, data: bytes) -> str:
        """Store `data` and return its sha256 hex; storing the same bytes again is a no-op."""
        sha256 = hashlib.sha256(data).hexdigest()
        try:
            await anyio.to_thread.run_sync(self.contents.write, sha256, data)
        except OSError as exc:
            raise StoreError(f"cannot write blob in {self.contents.where}: {exc}") from exc
        return sha256

    def open_blob(self, sha256: str) -> IO[bytes]:
        """The blob for reading, from its start. Blocking: call it in a worker thread.

        A missing blob is a `StoreError`, as for `read`.
        """
        try:
            return self.contents.open(_checked(sha256))
        except OSError as exc:
            raise StoreError(f"cannot read blob {sha256}: {exc}") from exc

    @asynccontextmanager
    async def staging(self) -> AsyncIterator[Staging]:
        """A private drafts directory for one run's incoming content, removed with every
        draft not kept when the block ends, however it ends."""

        def make() -> Path:
            private_dir(self._root)
            # A leading dot: never a two-hex-digit blob directory.
            prefix = f"{STAGING_PREFIX}{self._owner}-" if self._owner else STAGING_PREFIX
            return Path(tempfile.mkdtemp(dir=self._root, prefix=prefix))

        try:
            directory = await anyio.to_thread.run_sync(make)
        except OSError as exc:
            raise StoreError(f"cannot make a staging directory under {self._root}: {exc}") from exc
        try:
            yield Staging(self, directory)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: shutil.rmtree(directory, ignore_errors=True))

    def sweep_staging(self, owners: Iterable[str], *, unowned: bool) -> int:
        """Remove the staging directories of the server instances `owners` (dead ones:
        none of their drafts was kept, and none ever will be), and with `unowned` those
        named for no instance (an older Airlock's); how many. Blocking."""
        prefixes = tuple(f"{STAGING_PREFIX}{owner}-" for owner in owners)
        try:
            entries = list(self._root.iterdir())
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreError(f"cannot look for staging directories in {self._root}: {exc}") from exc
        removed = 0
        for path in entries:
            name = path.name
            if not name.startswith(STAGING_PREFIX):
                continue
            legacy = "-" not in name[len(STAGING_PREFIX) :]
            if name.startswith(prefixes) or (unowned and legacy):
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        return removed

    def _keep(self, draft_path: Path, sha256: str) -> None:
        self.contents.take(_checked(sha256), draft_path)

    async def read(self, sha256: str, offset: int = 0, length: int | None = None) -> bytes:
        """Up to `length` bytes of the blob from `offset` (to the end if `length` is None).

        A missing blob is a `StoreError`: the database named it, so the store lost it.
        """
        if offset < 0 or (length is not None and length < 0):
            raise ValueError(f"offset and length must be >= 0, not {offset} and {length}")
        name = _checked(sha256)

        def read() -> bytes:
            with self.contents.open(name) as f:
                f.seek(offset)
                return f.read(-1 if length is None else length)

        try:
            return await anyio.to_thread.run_sync(read)
        except OSError as exc:
            raise StoreError(f"cannot read blob {sha256}: {exc}") from exc

    async def exists(self, sha256: str) -> bool:
        """Whether the blob is stored; ValueError for a malformed name, as `path` does."""
        name = _checked(sha256)
        try:
            return await anyio.to_thread.run_sync(self.contents.has, name)
        except OSError as exc:
            raise StoreError(f"cannot check blob {sha256}: {exc}") from exc


def _checked(sha256: str) -> str:
    if not _SHA256_HEX.fullmatch(sha256):
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    return sha256


class Draft(BaseModel):
    """A file written into a `Staging` area and hashed there: not a blob until kept."""

    model_config = ConfigDict(frozen=True)

    name: str
    """The draft's file name inside its staging directory."""
    sha256: str
    size: int


class DraftWriter:
    """One draft being written: bytes in, hashed as they go, nothing held in memory.

    Blocking: use it in a worker thread. `finish` closes it and returns the `Draft`;
    `discard` removes it (also after `finish`).
    """

    def __init__(self, directory: Path) -> None:
        fd, name = tempfile.mkstemp(dir=directory, prefix=_DRAFT_PREFIX)
        self._path = Path(name)
        self._file = os.fdopen(fd, "wb")
        self._digest = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._digest.update(data)
        self.size += len(data)

    def finish(self) -> Draft:
        self._file.close()
        return Draft(name=self._path.name, sha256=self._digest.hexdigest(), size=self.size)

    def discard(self) -> None:
        self._file.close()
        self._path.unlink(missing_ok=True)


class Staging:
    """One run's drafts directory in the blob store's root (see `BlobStore.staging`)."""

    def __init__(self, store: BlobStore, directory: Path) -> None:
        self.store = store
        self._directory = directory

    def writer(self) -> DraftWriter:
        """A new draft. Blocking: call it in a worker thread (OSError as raised)."""
        return DraftWriter(self._directory)

    def temporary_file(self, in_memory: int) -> IO[bytes]:
        """An anonymous scratch file in the staging area, in memory up to `in_memory`
        bytes. Blocking past that point: use it in a worker thread."""
        spool: IO[bytes] = tempfile.SpooledTemporaryFile(  # noqa: SIM115 (the caller closes it)
            max_size=in_memory, dir=str(self._directory)
        )
        return spool

    def discard(self, draft: Draft) -> None:
        """Remove a draft that will not be kept. Blocking: call it in a worker thread."""
        self._draft_path(draft).unlink(missing_ok=True)

    async def keep(self, draft: Draft) -> str:
        """Make the draft the blob of its hash (a no-op when that blob exists) and return
        the hash. Keeping one draft twice is harmless."""
        path = self._draft_path(draft)
        try:
            await anyio.to_thread.run_sync(self.store._keep, path, draft.sha256)
        except FileNotFoundError:
            # Kept already (moved in); the blob must be there now.
            if not await self.store.exists(draft.sha256):
                raise StoreError(f"draft of blob {draft.sha256} is gone") from None
        except OSError as exc:
            raise StoreError(f"cannot keep blob {draft.sha256}: {exc}") from exc
        return draft.sha256

    def _draft_path(self, draft: Draft) -> Path:
        # The name is ours (mkstemp's), but it must never point outside the directory.
        if "/" in draft.name or not draft.name.startswith(_DRAFT_PREFIX):
            raise ValueError(f"not a draft name: {draft.name!r}")
        return self._directory / draft.name
