"""Blob contents in PostgreSQL, for a fleet: every replica reads what any replica stored.

A blob is rows of `blob_chunks` (1 MiB of bytea each, numbered from 0) plus one row of
`blob_contents` naming its size, written last in the same transaction: a reader sees the
whole blob or none of it, and two replicas storing the same bytes at once both succeed
(each insert is `ON CONFLICT DO NOTHING` on the content's name). Nothing holds a whole
blob in memory: a draft goes in a chunk at a time and a reader fetches the chunk it is in.
Database failures leave this module as `StoreError`, a missing blob as FileNotFoundError
(as a file would), so `BlobStore` reports both as for files.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TypeVar

from sqlalchemy import (
    Engine,
    select,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from airlock.errors import StoreError

from ..connection import driver_sentence
from ..schema import blob_chunks, blob_contents

_T = TypeVar("_T")

CHUNK_BYTES = 1024 * 1024


class PostgresContents:
    """Blob bytes in the fleet's database (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.where = engine.url.render_as_string(hide_password=True)

    def has(self, sha256: str) -> bool:
        return self._size(sha256) is not None

    def write(self, sha256: str, data: bytes) -> None:
        def chunks() -> list[bytes]:
            return [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]

        self._store(sha256, len(data), iter(chunks()))

    def take(self, sha256: str, draft: Path) -> None:
        if not self.has(sha256):
            with draft.open("rb") as f:
                self._store(sha256, draft.stat().st_size, iter(lambda: f.read(CHUNK_BYTES), b""))
        draft.unlink(missing_ok=True)

    def open(self, sha256: str) -> IO[bytes]:
        size = self._size(sha256)
        if size is None:
            raise FileNotFoundError(f"no blob {sha256} in {self.where}")
        return io.BufferedReader(_ChunkReader(self, sha256, size), buffer_size=CHUNK_BYTES)

    def chunk(self, sha256: str, seq: int) -> bytes:
        query = select(blob_chunks.c.data).where(
            blob_chunks.c.sha256 == sha256, blob_chunks.c.seq == seq
        )
        data = self._run(lambda conn: conn.execute(query).scalar_one_or_none())
        if data is None:
            raise FileNotFoundError(f"blob {sha256} lost its chunk {seq} in {self.where}")
        return bytes(data)

    def _size(self, sha256: str) -> int | None:
        query = select(blob_contents.c.size).where(blob_contents.c.sha256 == sha256)
        size: int | None = self._run(lambda conn: conn.execute(query).scalar_one_or_none())
        return size

    def _store(self, sha256: str, size: int, chunks: Iterator[bytes]) -> None:
        def store(conn: Connection) -> None:
            for seq, data in enumerate(chunks):
                conn.execute(
                    insert(blob_chunks)
                    .values(sha256=sha256, seq=seq, data=data)
                    .on_conflict_do_nothing()
                )
            conn.execute(
                insert(blob_contents)
                .values(sha256=sha256, size=size, chunk_bytes=CHUNK_BYTES)
                .on_conflict_do_nothing()
            )
            conn.commit()

        self._run(store)

    def _run(self, work: Callable[[Connection], _T]) -> _T:
        try:
            with self._engine.connect() as conn:
                return work(conn)
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot reach the blobs in {self.where}: {driver_sentence(exc)}"
            ) from exc


class _ChunkReader(io.RawIOBase):
    """A seekable reader of one blob that holds at most one chunk."""

    def __init__(self, contents: PostgresContents, sha256: str, size: int) -> None:
        self._contents, self._sha256, self._size = contents, sha256, size
        self._pos = 0
        self._seq, self._data = -1, b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._pos >= self._size:
            return 0
        seq, start = divmod(self._pos, CHUNK_BYTES)
        if seq != self._seq:
            self._seq, self._data = seq, self._contents.chunk(self._sha256, seq)
        piece = self._data[start : start + len(buffer)]
        buffer[: len(piece)] = piece
        self._pos += len(piece)
        return len(piece)
