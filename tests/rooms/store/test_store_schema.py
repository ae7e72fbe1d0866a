"""Tests of the store's schema and where it lives: migrations (a database the pre-Alembic
code wrote opens with every record kept; a newer one is refused untouched), store URLs, and
two servers on one PostgreSQL writing the same session at once."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine
from stores import old_database, query
from support import run_record, session_record, ws_file

from airlock.errors import StoreError
from airlock.store import (
    SCHEMA_REVISION,
    SCHEMA_VERSION,
    ApprovalRecord,
    Database,
    WorkspaceDelta,
    WorkspaceFile,
)
from airlock.store.connection import location

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_schema_4_database_the_old_code_wrote_opens_with_every_record_kept(
    tmp_path: Path,
) -> None:
    path = old_database(tmp_path / "airlock.db")
    db = await Database.open(path)
    try:
        s1 = await db.get_session("s1")
        assert s1 is not None and s1.created_at == 1700000000.125
        s2 = await db.get_session("s2")
        assert s2 is not None and (s2.end_reason, s2.containers_removed) == (
            "ended by the agent",
            1,
        )
        # r1 and r2 were created in one clock tick: the later insert is newer.
        assert [r.id for r in await db.list_runs(session_id="s1")] == ["r2", "r1"]
        r2 = await db.get_run("r2")
        assert r2 is not None
        assert (r2.status, r2.peak_memory_bytes, r2.limits["memory_bytes"]) == (
            "ok",
            3 << 30,
            5 << 30,
        )
        assert (r2.runtime, r2.instance_id, r2.cpu_seconds) == ("runsc", "i-old", 0.25)
        assert [a.path for a in await db.list_artifacts("r2")] == ["out/a.txt"]
        assert [f.path for f in await db.list_run_inputs("r2")] == ["in.txt"]
        (egress,) = await db.list_egress(run_id="r2")
        assert (egress.injected, egress.resolved_ip) == (("Authorization",), "93.184.216.34")
        (grant,) = await db.list_grants(tenant="t1")
        assert (grant.revoked_at, grant.scope["ports"]) == (1700000005.0, [443])
        approval = await db.get_approval("a1")
        assert approval is not None and approval.params == {"host": "x.example.com"}
        (drill,) = await db.list_drills()
        assert drill.rows[0]["held"] is True
        head = await db.workspace_head("s1")
        assert head.version == 2
        assert [(f.path, f.kind, f.mode, f.written_by) for f in head.files] == [
            ("src", "dir", 0o755, "r1"),
            ("src/x.py", "file", 0o600, "r1"),
        ]
        copy = await db.get_copy("c1")
        assert copy is not None and copy.root_path == "/home/u/repo"
        assert [p.id for p in await db.list_patches(session_id="s1")] == ["p2", "p1"]
        found = await db.find_patch("c1", "7" * 64)
        assert found is not None and found.id == "p1"
        # New rows keep the order after the old ones.
        await db.create_run(run_record("r3", session_id="s1", created_at=1700000010.0))
        assert [r.id for r in await db.list_runs(session_id="s1")] == ["r3", "r2", "r1"]
        delta = WorkspaceDelta(base_version=2, upserts=(ws_file("new.txt"),))
        assert (await db.commit_workspace("s1", delta, writer="r3", at=1.0)).version == 3
    finally:
        await db.close()
    assert query(path, "SELECT version_num FROM alembic_version") == [(SCHEMA_REVISION,)]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    # Opening again finds it at the head and changes nothing.
    await (await Database.open(path)).close()
    assert len(query(path, "SELECT id FROM runs")) == 3


async def test_the_migrations_make_exactly_the_tables_the_schema_describes(
    store_at: Path | str,
) -> None:
    await (await Database.open(store_at)).close()
    from airlock.store.schema import metadata

    engine = create_engine(location(store_at).url)
    try:
        with engine.connect() as conn:
            differences = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()
    assert differences == []


async def test_a_pre_alembic_database_adopted_has_the_tables_the_schema_describes(
    tmp_path: Path,
) -> None:
    path = old_database(tmp_path / "airlock.db")
    await (await Database.open(path)).close()
    from airlock.store.schema import metadata

    engine = create_engine(location(path).url)
    try:
        with engine.connect() as conn:
            differences = compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()
    left = []
    for difference in differences:
        # The old DDL's `id TEXT PRIMARY KEY` may hold NULL (a SQLite quirk; no code of
        # ours writes one), and SQLAlchemy's reflection misses the ON DELETE of its inline
        # REFERENCES, checked below with SQLite's own pragma instead.
        if isinstance(difference, list) and all(
            d[0] == "modify_nullable" and metadata.tables[d[2]].c[d[3]].primary_key
            for d in difference
        ):
            continue
        if isinstance(difference, tuple) and difference[0] in ("remove_fk", "add_fk"):
            continue
        left.append(difference)
    assert left == []
    for table in ("artifacts", "run_inputs", "workspace_files", "workspace_versions"):
        (foreign_key,) = query(path, f"PRAGMA foreign_key_list({table})")
        assert foreign_key[6] == "CASCADE"


async def test_a_database_of_an_unknown_revision_is_refused_and_left_untouched(
    store_at: Path | str,
) -> None:
    await (await Database.open(store_at)).close()
    query(store_at, "UPDATE alembic_version SET version_num = '9999_from_the_future'")
    before = await anyio.Path(store_at).read_bytes() if isinstance(store_at, Path) else None
    with pytest.raises(StoreError, match=r"revision '9999_from_the_future'.*upgrade Airlock"):
        await Database.open(store_at)
    assert query(store_at, "SELECT version_num FROM alembic_version") == [("9999_from_the_future",)]
    if isinstance(store_at, Path):
        assert await anyio.Path(store_at).read_bytes() == before


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://root:hunter2@db.example/airlock", "neither PostgreSQL nor SQLite"),
        ("sqlite://", "names no file"),
        ("not a url", "not a database URL"),
    ],
)
async def test_a_store_url_of_no_known_database_is_refused_naming_the_fix(
    url: str, expected: str
) -> None:
    with pytest.raises(StoreError, match=expected) as info:
        await Database.open(url)
    assert "--store postgresql://USER:PASSWORD@HOST:PORT/DATABASE" in str(info.value)
    assert "hunter2" not in str(info.value)


async def test_an_unreachable_postgresql_is_refused_without_showing_the_password() -> None:
    url = "postgresql://airlock:hunter2@127.0.0.1:1/records?password=hunter3"
    with pytest.raises(StoreError) as info:
        await Database.open(url)
    message = str(info.value)
    assert "postgresql://airlock:***@127.0.0.1:1/records" in message
    assert "hunter2" not in message and "hunter3" not in message


async def test_a_wrong_postgresql_password_is_refused_without_showing_it(
    postgres_url: str,
) -> None:
    parts = postgres_url.split("@", 1)
    wrong = parts[0].rsplit(":", 1)[0] + ":not-the-password@" + parts[1]
    with pytest.raises(StoreError, match="password authentication failed") as info:
        await Database.open(wrong)
    assert "not-the-password" not in str(info.value)


async def test_two_servers_committing_one_session_at_once_lose_nothing(postgres_url: str) -> None:
    # Two Database objects are two servers' pools: each commit its own transaction.
    first, second = await Database.open(postgres_url), await Database.open(postgres_url)
    try:
        await first.create_session(session_record())
        base = WorkspaceDelta(base_version=0, upserts=(ws_file("shared"),))
        await first.commit_workspace("s1", base, writer="r0", at=1.0)
        commits = []

        async def one(db: Database, i: int) -> None:
            delta = WorkspaceDelta(
                base_version=1,
                upserts=(ws_file(f"own-{i:02}", "2"), ws_file("same", str(i % 10))),
            )
            commits.append(await db.commit_workspace("s1", delta, writer=f"r{i}", at=2.0))

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(one, (first, second)[i % 2], i)
        head = await second.workspace_head("s1")
    finally:
        await first.close()
        await second.close()
    assert head.version == 17
    assert sorted(c.version for c in commits) == list(range(2, 18))
    assert [f.path for f in head.files] == sorted(
        [f"own-{i:02}" for i in range(16)] + ["same", "shared"]
    )
    assert any(c.conflicts for c in commits)
    assert head.by_path()["same"].version == max(c.version for c in commits)


def approval(i: int) -> ApprovalRecord:
    return ApprovalRecord(
        id=f"apr_{i}",
        tenant="t1",
        session_id=f"s{i % 2}",
        capability="http",
        params={},
        ttl_s=600,
        reason="",
        status="pending",
        created_at=10.0,
        expires_at=610.0,
    )


async def test_two_servers_asking_at_once_never_overshoot_the_tenants_pending_cap(
    postgres_url: str,
) -> None:
    first, second = await Database.open(postgres_url), await Database.open(postgres_url)
    refused: list[str | None] = []
    try:

        async def one(db: Database, i: int) -> None:
            refused.append(await db.create_approval(approval(i), max_pending_tenant=3))

        async with anyio.create_task_group() as tg:
            for i in range(12):
                tg.start_soon(one, (first, second)[i % 2], i)
        pending = await first.list_approvals(tenant="t1", status="pending")
    finally:
        await first.close()
        await second.close()
    assert len(pending) == 3
    assert sorted(refused, key=str) == [None] * 3 + ["tenant"] * 9


async def test_seconds_keep_their_fractions_on_both_databases(store_at: Path | str) -> None:
    db = await Database.open(store_at)
    try:
        await db.create_session(session_record(created_at=1764601234.123456))
        stored = await db.get_session("s1")
    finally:
        await db.close()
    assert stored is not None and stored.created_at == 1764601234.123456


async def test_sizes_past_two_gibibytes_are_kept(store_at: Path | str) -> None:
    db = await Database.open(store_at)
    try:
        await db.create_session(session_record())
        big = WorkspaceFile(path="big.bin", sha256="b" * 64, size=5 << 30)
        await db.commit_workspace(
            "s1", WorkspaceDelta(base_version=0, upserts=(big,)), writer="r", at=1.0
        )
        head = await db.workspace_head("s1")
    finally:
        await db.close()
    assert head.files[0].size == 5 << 30


async def test_a_sqlite_url_leaves_its_directory_as_it_is(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    db = await Database.open(f"sqlite:///{shared}/records.db")
    try:
        await db.create_session(session_record())
    finally:
        await db.close()
    assert (shared.stat().st_mode & 0o7777) == 0o1777
    assert ((shared / "records.db").stat().st_mode & 0o777) == 0o600
