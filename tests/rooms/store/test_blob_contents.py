"""Blob contents on both storages: files under the data directory and a real PostgreSQL
(the fleet's), through the one `BlobStore` every caller uses."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
import sqlalchemy

from airlock.errors import StoreError
from airlock.store import BlobStore, Database
from airlock.store.postgres.blobs import CHUNK_BYTES, PostgresContents
from airlock.store.schema import blob_chunks

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pg_engine(postgres_url: str) -> AsyncIterator[sqlalchemy.Engine]:
    """The engine of a real PostgreSQL store, its schema made by the store's migrations."""
    db = await Database.open(postgres_url)
    yield db.engine
    await db.close()


@pytest.fixture(params=["files", "postgresql"])
async def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    if request.param == "files":
        yield BlobStore(tmp_path / "blobs")
    else:
        db = await Database.open(request.getfixturevalue("postgres_url"))
        yield BlobStore(tmp_path / "blobs", contents=PostgresContents(db.engine))
        await db.close()


def _big(size: int) -> bytes:
    return (hashlib.sha256(b"seed").digest() * (size // 32 + 1))[:size]


async def test_a_blob_of_several_chunks_reads_back_whole_and_by_range(blobs: BlobStore) -> None:
    data = _big(2 * CHUNK_BYTES + 12345)
    sha = await blobs.put(data)
    assert sha == hashlib.sha256(data).hexdigest()
    assert await blobs.exists(sha)
    assert await blobs.read(sha) == data
    # Ranges inside one chunk, across a chunk boundary, past the end.
    assert await blobs.read(sha, 10, 20) == data[10:30]
    assert await blobs.read(sha, CHUNK_BYTES - 5, 10) == data[CHUNK_BYTES - 5 : CHUNK_BYTES + 5]
    assert await blobs.read(sha, len(data) - 3, 100) == data[-3:]
    assert await blobs.read(sha, len(data) + 10) == b""
    with blobs.open_blob(sha) as f:
        assert f.read(7) == data[:7]
        f.seek(2 * CHUNK_BYTES)
        assert f.read() == data[2 * CHUNK_BYTES :]


async def test_the_empty_blob_and_the_same_bytes_twice(blobs: BlobStore) -> None:
    empty = await blobs.put(b"")
    assert await blobs.read(empty) == b""
    assert await blobs.put(b"same") == await blobs.put(b"same")
    assert await blobs.read(hashlib.sha256(b"same").hexdigest()) == b"same"


async def test_a_kept_draft_is_stored_a_chunk_at_a_time_and_leaves_the_staging_area(
    blobs: BlobStore, tmp_path: Path
) -> None:
    data = _big(CHUNK_BYTES + 1)
    async with blobs.staging() as staging:
        writer = staging.writer()
        for i in range(0, len(data), 4096):
            writer.write(data[i : i + 4096])
        draft = writer.finish()
        assert not await blobs.exists(draft.sha256)
        assert await staging.keep(draft) == draft.sha256
        assert await staging.keep(draft) == draft.sha256  # twice is harmless
        drafts = [p for p in (tmp_path / "blobs").rglob("draft-*")]
        assert drafts == []
    assert await blobs.read(draft.sha256) == data


async def test_a_missing_blob_is_a_store_error_caused_by_file_not_found(blobs: BlobStore) -> None:
    sha = "0" * 64
    assert not await blobs.exists(sha)
    with pytest.raises(StoreError) as info:
        await blobs.read(sha)
    assert isinstance(info.value.__cause__, FileNotFoundError)
    with pytest.raises(StoreError):
        blobs.open_blob(sha)


@pytest.mark.parametrize("name", ["../x", "A" * 64, "a" * 63, "", "/" + "a" * 63])
async def test_a_malformed_name_is_refused_before_any_storage(blobs: BlobStore, name: str) -> None:
    with pytest.raises(ValueError):
        await blobs.read(name)
    with pytest.raises(ValueError):
        await blobs.exists(name)


async def test_two_replicas_storing_the_same_bytes_at_once_both_succeed(
    pg_engine: sqlalchemy.Engine, tmp_path: Path
) -> None:
    data = _big(3 * CHUNK_BYTES)
    stores = [BlobStore(tmp_path / f"r{i}", contents=PostgresContents(pg_engine)) for i in range(4)]
    names: list[str] = []

    async def put(store: BlobStore) -> None:
        names.append(await store.put(data))

    async with anyio.create_task_group() as tg:
        for store in stores:
            tg.start_soon(put, store)
    assert len(set(names)) == 1
    for store in stores:
        assert await store.read(names[0]) == data
    with pg_engine.connect() as conn:
        count = conn.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(blob_chunks))
        assert count.scalar_one() == 3


async def test_a_write_cut_off_midway_leaves_no_blob_and_no_chunk(
    pg_engine: sqlalchemy.Engine, tmp_path: Path
) -> None:
    contents = PostgresContents(pg_engine)
    draft = tmp_path / "draft"
    draft.write_bytes(_big(3 * CHUNK_BYTES))
    sha = hashlib.sha256(draft.read_bytes()).hexdigest()
    real_chunk_store = contents._store

    def failing(sha256: str, size: int, chunks: Iterator[bytes]) -> None:
        def cut() -> Iterator[bytes]:
            yield next(chunks)
            raise OSError("the disk went away")

        real_chunk_store(sha256, size, cut())

    contents._store = failing  # type: ignore[method-assign]
    with pytest.raises(OSError):
        contents.take(sha, draft)
    assert not contents.has(sha)
    with pg_engine.connect() as conn:
        count = conn.execute(sqlalchemy.select(sqlalchemy.func.count()).select_from(blob_chunks))
        assert count.scalar_one() == 0
    assert draft.exists()  # nothing was lost: the draft is still there to keep again


async def test_an_unreachable_database_is_a_store_error_naming_it_without_its_password(
    tmp_path: Path,
) -> None:
    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://airlock:hunter2@127.0.0.1:1/nothing",
        connect_args={"connect_timeout": 2},
    )
    blobs = BlobStore(tmp_path / "blobs", contents=PostgresContents(engine))
    with pytest.raises(StoreError) as info:
        await blobs.put(b"x")
    assert "127.0.0.1:1/nothing" in str(info.value)
    assert "hunter2" not in str(info.value)
    engine.dispose()
