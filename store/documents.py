"""Small named documents read and replaced whole by one writer at a time: the seam between
what keeps one (a file on a single server, a row of the fleet's database) and what it holds.

`FileDocument` is the single server's: a file replaced atomically (written 0600 beside it,
fsynced, renamed, the directory fsynced) under an exclusive `flock` of a lock file next to
it, so threads and processes alike take turns. `postgres.documents.PostgresDocuments` is the
fleet's. OSError leaves here as it is: the owner of the document says what it was.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from .private import private_dir


class DocumentUpdate:
    """One document being changed: its bytes now (`current`, None if never written), and
    `replace` to write new ones when the change ends without an exception."""

    def __init__(self, current: bytes | None) -> None:
        self.current = current
        self.replacement: bytes | None = None

    def replace(self, body: bytes) -> None:
        self.replacement = body


class Document(Protocol):
    where: str
    """Where it is kept, for messages (a path, or a database named without password)."""

    def read(self) -> bytes | None:
        """The bytes now; None if it was never written. Blocking."""
        ...

    def updating(self) -> AbstractContextManager[DocumentUpdate]:
        """The document for one writer at a time; blocking."""
        ...


class FileDocument:
    """A document that is one file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)

    def read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    @contextmanager
    def updating(self) -> Iterator[DocumentUpdate]:
        private_dir(self.path.parent)
        lock_fd = os.open(
            self.path.parent / f".{self.path.name}.lock", os.O_RDWR | os.O_CREAT, 0o600
        )
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            update = DocumentUpdate(self.read())
            yield update
            if update.replacement is not None:
                self._write(update.replacement)
        finally:
            os.close(lock_fd)  # closing releases the flock

    def _write(self, body: bytes) -> None:
        # Same directory, so os.replace is atomic; mkstemp creates the file 0600.
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
