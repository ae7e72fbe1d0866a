"""Tests of the store room: the database (each test once on SQLite, once on a real
PostgreSQL: the `store_at` fixture) and the blob store, on real files."""

from __future__ import annotations

import hashlib
import sqlite3
import stat
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy.exc
from stores import query
from support import run_record, session_record, ws_file

from airlock.errors import StoreError
from airlock.store import (
    SCHEMA_VERSION,
    ApprovalRecord,
    ArtifactRecord,
    BlobStore,
    Database,
    EgressRecord,
    GrantRecord,
    WorkspaceDelta,
    WorkspaceFile,
    WorkspaceHead,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def artifact(path: str, *, run_id: str = "r1") -> ArtifactRecord:
    return ArtifactRecord(
        run_id=run_id,
        path=path,
        size=3,
        sha256="a" * 64,
        mime_type="text/plain",
        tenant="t1",
        created_at=300.0,
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# Sessions


async def test_created_session_reads_back_equal(db: Database) -> None:
    await db.create_session(session_record())
    assert await db.get_session("s1") == session_record()


async def test_unknown_session_reads_as_none(db: Database) -> None:
    assert await db.get_session("nope") is None


async def test_touch_moves_last_used_and_expiry(db: Database) -> None:
    await db.create_session(session_record())
    await db.touch_session("s1", last_used_at=150.0, expires_at=750.0)
    got = await db.get_session("s1")
    assert got is not None
    assert (got.last_used_at, got.expires_at) == (150.0, 750.0)


async def test_touch_leaves_ended_session_unchanged(db: Database) -> None:
    await db.create_session(session_record())
    await db.end_session("s1", ended_at=120.0, reason="end_session", containers_removed=0)
    before = await db.get_session("s1")
    await db.touch_session("s1", last_used_at=150.0, expires_at=750.0)
    assert await db.get_session("s1") == before


async def test_ending_twice_keeps_the_first_end(db: Database) -> None:
    await db.create_session(session_record())
    await db.end_session("s1", ended_at=120.0, reason="end_session", containers_removed=2)
    await db.end_session("s1", ended_at=130.0, reason="shutdown", containers_removed=0)
    got = await db.get_session("s1")
    assert got is not None
    assert (got.ended_at, got.end_reason, got.containers_removed) == (120.0, "end_session", 2)


async def test_list_sessions_newest_first_and_only_live_ones_when_asked(db: Database) -> None:
    # s1 expires at 700 and s2 at 800; s3 (another tenant) ended; s4 expired at 710.
    for name, tenant, created in (("s1", "t1", 100.0), ("s2", "t1", 200.0), ("s3", "t2", 150.0)):
        await db.create_session(session_record(name, tenant=tenant, created_at=created))
    await db.create_session(session_record("s4", created_at=110.0))
    await db.end_session("s3", ended_at=160.0, reason="end_session", containers_removed=0)
    every = await db.list_sessions()
    assert [s.id for s in every] == ["s2", "s3", "s4", "s1"]
    assert [s.id for s in await db.list_sessions(live_at=705.0)] == ["s2", "s4"]
    assert [s.id for s in await db.list_sessions(live_at=705.0, tenant="t2")] == []
    assert [s.id for s in await db.list_sessions(tenant="t1", limit=1)] == ["s2"]


async def test_list_approvals_gives_the_latest_ones_newest_first_when_asked(
    db: Database,
) -> None:
    await db.create_session(session_record())
    for n in range(3):
        created = 100.0 + n
        record = ApprovalRecord(
            id=f"apr_{n}", tenant="t1", session_id="s1", capability="c", params={}, ttl_s=60,
            reason="r", status="pending", created_at=created, expires_at=created + 60,
        )  # fmt: skip
        assert await db.create_approval(record) is None
    assert [a.id for a in await db.list_approvals(limit=2)] == ["apr_0", "apr_1"]
    latest = await db.list_approvals(limit=2, newest_first=True)
    assert [a.id for a in latest] == ["apr_2", "apr_1"]


async def test_duplicate_session_id_raises_store_error_from_the_driver(db: Database) -> None:
    await db.create_session(session_record())
    with pytest.raises(StoreError) as info:
        await db.create_session(session_record())
    assert isinstance(info.value.__cause__, sqlalchemy.exc.IntegrityError)


# Runs


async def test_created_run_reads_back_equal_with_its_limits(db: Database) -> None:
    await db.create_session(session_record())
    await db.create_run(run_record())
    assert await db.get_run("r1") == run_record()


async def test_unknown_run_reads_as_none(db: Database) -> None:
    assert await db.get_run("nope") is None


async def test_run_of_unknown_session_raises_store_error(db: Database) -> None:
    with pytest.raises(StoreError):
        await db.create_run(run_record(session_id="nope"))
    assert await db.get_run("r1") is None


async def test_finish_overwrites_outcome_and_keeps_creation_fields(db: Database) -> None:
    await db.create_session(session_record())
    await db.create_run(run_record())
    outcome: dict[str, Any] = {
        "status": "ok",
        "finished_at": 201.5,
        "duration_ms": 1500,
        "exit_code": 3,
        "cpu_seconds": 0.25,
        "peak_memory_bytes": 12 << 20,
        "stdout_bytes": 10,
        "stdout_sha256": "d" * 64,
        "stderr_bytes": 4,
        "stderr_sha256": "e" * 64,
        "error": None,
    }
    # A finished record that also tries to rewrite a creation field: only the outcome lands.
    await db.finish_run(run_record().model_copy(update={**outcome, "language": "bash"}))
    assert await db.get_run("r1") == run_record().model_copy(update=outcome)


async def test_finishing_unknown_run_raises_store_error(db: Database) -> None:
    with pytest.raises(StoreError, match="unknown run"):
        await db.finish_run(run_record("nope").model_copy(update={"status": "ok"}))


async def test_list_runs_filters_and_orders_newest_first(db: Database) -> None:
    await db.create_session(session_record("s1", tenant="t1"))
    await db.create_session(session_record("s2", tenant="t1"))
    await db.create_session(session_record("s3", tenant="t2"))
    await db.create_run(run_record("old", session_id="s1", created_at=1.0))
    await db.create_run(run_record("new", session_id="s1", created_at=3.0))
    await db.create_run(run_record("other-session", session_id="s2", created_at=2.0))
    await db.create_run(run_record("other-tenant", session_id="s3", tenant="t2", created_at=4.0))

    assert [r.id for r in await db.list_runs(session_id="s1")] == ["new", "old"]
    assert [r.id for r in await db.list_runs(tenant="t1")] == ["new", "other-session", "old"]
    assert [r.id for r in await db.list_runs(session_id="s3", tenant="t1")] == []
    assert [r.id for r in await db.list_runs()] == ["other-tenant", "new", "other-session", "old"]


async def test_list_runs_returns_at_most_limit_newest(db: Database) -> None:
    await db.create_session(session_record())
    for i in range(5):
        await db.create_run(run_record(f"r{i}", created_at=float(i)))
    assert [r.id for r in await db.list_runs(limit=2)] == ["r4", "r3"]


async def test_list_runs_orders_same_timestamp_by_insertion(db: Database) -> None:
    await db.create_session(session_record())
    await db.create_run(run_record("first", created_at=5.0))
    await db.create_run(run_record("second", created_at=5.0))
    assert [r.id for r in await db.list_runs()] == ["second", "first"]


async def test_list_runs_rejects_negative_limit(db: Database) -> None:
    with pytest.raises(ValueError):
        await db.list_runs(limit=-1)


async def test_mark_unfinished_closes_only_running_runs_of_the_named_owners(db: Database) -> None:
    await db.create_session(session_record())
    await db.create_run(run_record("a", instance="dead"))
    await db.create_run(run_record("b", instance="dead"))
    await db.create_run(run_record("live", instance="alive"))
    await db.create_run(run_record("done", instance="dead"))
    done = run_record("done", instance="dead").model_copy(
        update={"status": "ok", "finished_at": 201.0}
    )
    await db.finish_run(done)

    count = await db.mark_unfinished_runs(
        instance_ids=["dead", "gone"], status="killed", error="server died", finished_at=9.0
    )

    assert count == 2
    for run_id in ("a", "b"):
        got = await db.get_run(run_id)
        assert got is not None
        assert (got.status, got.error, got.finished_at) == ("killed", "server died", 9.0)
    assert await db.get_run("done") == done
    assert await db.get_run("live") == run_record("live", instance="alive")
    again = await db.mark_unfinished_runs(
        instance_ids=["dead"], status="killed", error="again", finished_at=10.0
    )
    assert again == 0


# Artifacts


async def test_artifacts_list_by_path_and_get_one(db: Database) -> None:
    await db.create_session(session_record())
    await db.create_run(run_record("r1"))
    await db.create_run(run_record("r2"))
    await db.add_artifacts([artifact("out/b.txt"), artifact("a.txt"), artifact("x", run_id="r2")])

    assert [a.path for a in await db.list_artifacts("r1")] == ["a.txt", "out/b.txt"]
    assert await db.get_artifact("r1", "out/b.txt") == artifact("out/b.txt")
    assert await db.get_artifact("r1", "x") is None
    assert await db.list_artifacts("nope") == []


async def test_add_artifacts_stores_none_when_one_fails(db: Database) -> None:
    await db.create_session(session_record())
    await db.create_run(run_record())
    with pytest.raises(StoreError):
        await db.add_artifacts([artifact("a.txt"), artifact("a.txt")])
    assert await db.list_artifacts("r1") == []


# Session workspaces


def ws_dir(path: str, mode: int = 0o755) -> WorkspaceFile:
    return WorkspaceFile(path=path, sha256="", size=0, kind="dir", mode=mode)


async def test_a_new_session_workspace_is_version_0_and_empty(db: Database) -> None:
    assert await db.workspace_head("nope") == WorkspaceHead(version=0)


async def test_commit_makes_a_version_with_writer_mode_and_mtime(db: Database) -> None:
    await db.create_session(session_record())
    delta = WorkspaceDelta(
        base_version=0,
        upserts=(ws_dir("bin", 0o700), ws_file("bin/run.sh", mode=0o755, mtime=1700000000)),
    )
    commit = await db.commit_workspace("s1", delta, writer="r1", at=1.0)
    assert (commit.base_version, commit.version, commit.applied, commit.conflicts) == (0, 1, 2, ())
    head = await db.workspace_head("s1")
    assert head.version == 1
    script = head.by_path()["bin/run.sh"]
    assert (script.mode, script.mtime, script.written_by, script.version) == (
        0o755,
        1700000000,
        "r1",
        1,
    )
    assert head.by_path()["bin"].kind == "dir"


async def test_commit_that_changes_nothing_makes_no_version(db: Database) -> None:
    await db.create_session(session_record())
    await db.commit_workspace(
        "s1", WorkspaceDelta(base_version=0, upserts=(ws_file("a"),)), writer="r1", at=1.0
    )
    again = await db.commit_workspace(
        "s1", WorkspaceDelta(base_version=0, deletes=("never-there",)), writer="r2", at=2.0
    )
    assert (again.version, again.applied) == (1, 0)


async def test_sessions_have_separate_workspaces(db: Database) -> None:
    await db.create_session(session_record("s1"))
    await db.create_session(session_record("s2"))
    await db.commit_workspace(
        "s1", WorkspaceDelta(base_version=0, upserts=(ws_file("a"),)), writer="r1", at=1.0
    )
    assert await db.workspace_head("s2") == WorkspaceHead(version=0)


async def test_commit_from_an_unknown_version_is_refused_and_changes_nothing(
    db: Database,
) -> None:
    await db.create_session(session_record())
    with pytest.raises(StoreError, match="no version 5"):
        await db.commit_workspace("s1", WorkspaceDelta(base_version=5), writer="r1", at=1.0)
    assert await db.workspace_head("s1") == WorkspaceHead(version=0)


async def test_commit_for_an_unknown_session_fails_and_keeps_nothing(db: Database) -> None:
    delta = WorkspaceDelta(base_version=0, upserts=(ws_file("a"),))
    with pytest.raises(StoreError):
        await db.commit_workspace("ghost", delta, writer="r1", at=1.0)
    assert await db.workspace_head("ghost") == WorkspaceHead(version=0)


async def test_sixteen_concurrent_commits_from_one_base_all_land(
    db: Database, store_at: Path | str
) -> None:
    await db.create_session(session_record())
    await db.commit_workspace(
        "s1", WorkspaceDelta(base_version=0, upserts=(ws_file("shared"),)), writer="r0", at=1.0
    )
    commits = []

    async def one(i: int) -> None:
        delta = WorkspaceDelta(
            base_version=1,
            upserts=(ws_file(f"own-{i:02}", "2"), ws_file("same", str(i % 10))),
            deletes=("shared",),
        )
        commits.append(await db.commit_workspace("s1", delta, writer=f"r{i}", at=2.0))

    async with anyio.create_task_group() as tg:
        for i in range(16):
            tg.start_soon(one, i)
    head = await db.workspace_head("s1")
    paths = [e.path for e in head.files]
    assert paths == sorted([f"own-{i:02}" for i in range(16)] + ["same"])
    assert head.version == 17
    assert sorted(c.version for c in commits) == list(range(2, 18))
    # Every commit but the first saw `same` written by an earlier one, differently or not.
    first = min(commits, key=lambda c: c.version)
    assert all(c.path != "shared" for commit in commits for c in commit.conflicts)
    assert first.conflicts == ()
    conflicted = [c for c in commits if c.conflicts]
    assert conflicted, "the same path written by 16 runs must conflict somewhere"
    last = max(commits, key=lambda c: c.version)
    assert head.by_path()["same"].version == last.version
    # The deletion was applied once: only one version records it.
    deletions = query(
        store_at, "SELECT COUNT(*) FROM workspace_changes WHERE path = 'shared' AND deleted = 1"
    )
    assert deletions == [(1,)]


async def test_database_of_schema_1_opens_with_its_workspace_kept(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(
            """
            CREATE TABLE sessions (id TEXT PRIMARY KEY, tenant TEXT NOT NULL,
                created_at REAL NOT NULL, last_used_at REAL NOT NULL, expires_at REAL NOT NULL,
                ended_at REAL, end_reason TEXT, containers_removed INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE workspace_files (
                session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
                path TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
                PRIMARY KEY (session_id, path));
            INSERT INTO sessions VALUES ('s1', 't1', 1, 1, 1000, NULL, NULL, 0);
            INSERT INTO workspace_files VALUES ('s1', 'old.txt', '"""
            + "1" * 64
            + """', 1);
            PRAGMA user_version = 1;
            """
        )
    db = await Database.open(path)
    try:
        head = await db.workspace_head("s1")
        assert head == WorkspaceHead(version=0, files=(ws_file("old.txt"),))
        delta = WorkspaceDelta(base_version=0, upserts=(ws_file("new.txt", "2"),))
        assert (await db.commit_workspace("s1", delta, writer="r1", at=2.0)).version == 1
        assert [e.path for e in (await db.workspace_head("s1")).files] == ["new.txt", "old.txt"]
    finally:
        await db.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


# The database file


async def test_concurrent_writes_from_many_tasks_all_land(db: Database) -> None:
    await db.create_session(session_record())
    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(db.create_run, run_record(f"r{i}", created_at=float(i)))
    assert len(await db.list_runs(limit=100)) == 50


async def test_records_survive_close_and_reopen(store_at: Path | str) -> None:
    path = store_at.parent / "data" / "airlock.db" if isinstance(store_at, Path) else store_at
    db = await Database.open(path)
    await db.create_session(session_record())
    await db.create_run(run_record())
    await db.add_artifacts([artifact("a.txt")])
    delta = WorkspaceDelta(base_version=0, upserts=(ws_file("a.txt", mode=0o700, mtime=5),))
    await db.commit_workspace("s1", delta, writer="r1", at=1.0)
    workspace = await db.workspace_head("s1")
    await db.close()

    db = await Database.open(path)
    try:
        assert await db.get_session("s1") == session_record()
        assert await db.get_run("r1") == run_record()
        assert await db.list_artifacts("r1") == [artifact("a.txt")]
        assert await db.workspace_head("s1") == workspace
    finally:
        await db.close()


async def test_database_file_is_wal_private_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "airlock.db"
    await (await Database.open(path)).close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert mode(path) == 0o600


async def test_open_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "airlock.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="upgrade Airlock"):
        await Database.open(path)


async def test_open_below_a_file_raises_store_error_from_oserror(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StoreError) as info:
        await Database.open(tmp_path / "file" / "airlock.db")
    assert isinstance(info.value.__cause__, OSError)


async def test_calls_after_close_raise_store_error(store_at: Path | str) -> None:
    db = await Database.open(store_at)
    await db.close()
    with pytest.raises(StoreError):
        await db.get_session("s1")


# Blobs


async def test_put_returns_sha256_and_read_returns_the_bytes(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    data = b"hello, blob"
    sha = await blobs.put(data)
    assert sha == hashlib.sha256(data).hexdigest()
    assert blobs.path(sha) == tmp_path / "blobs" / sha[:2] / sha[2:]
    assert await blobs.read(sha) == data
    assert await blobs.exists(sha)


async def test_read_honours_offset_and_length(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path)
    sha = await blobs.put(b"0123456789")
    assert await blobs.read(sha, offset=3, length=4) == b"3456"
    assert await blobs.read(sha, offset=7) == b"789"
    assert await blobs.read(sha, offset=8, length=100) == b"89"
    assert await blobs.read(sha, offset=20) == b""
    with pytest.raises(ValueError):
        await blobs.read(sha, offset=-1)


async def test_put_twice_keeps_one_file_and_no_temporaries(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    first = await blobs.put(b"same")
    second = await blobs.put(b"same")
    assert first == second
    files = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert files == [blobs.path(first)]


async def test_blob_files_are_0600_and_dirs_0700(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    path = blobs.path(await blobs.put(b"secret"))
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert mode(tmp_path / "blobs") == 0o700


@pytest.mark.parametrize(
    "name",
    ["../x", "../" + "a" * 61, "A" * 64, "g" * 64, "a" * 63, "a" * 65, "", "/" + "a" * 63],
)
def test_path_rejects_anything_but_64_lowercase_hex(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        BlobStore(tmp_path).path(name)


async def test_missing_blob_does_not_exist_and_reading_it_raises_store_error(
    tmp_path: Path,
) -> None:
    blobs = BlobStore(tmp_path)
    sha = "0" * 64
    assert not await blobs.exists(sha)
    with pytest.raises(StoreError) as info:
        await blobs.read(sha)
    assert isinstance(info.value.__cause__, FileNotFoundError)


async def test_a_kept_draft_becomes_its_blob_and_the_rest_go_with_the_staging_area(
    tmp_path: Path,
) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    async with blobs.staging() as staging:
        kept = staging.writer()
        for piece in (b"hello, ", b"streamed ", b"blob"):
            kept.write(piece)
        draft = kept.finish()
        dropped = staging.writer()
        dropped.write(b"never a blob")
        dropped.finish()
        cut = staging.writer()
        cut.write(b"half")
        cut.discard()
        assert draft.sha256 == hashlib.sha256(b"hello, streamed blob").hexdigest()
        assert draft.size == 20
        # A draft is no blob until it is kept.
        assert not await blobs.exists(draft.sha256)
        assert await staging.keep(draft) == draft.sha256
        assert await staging.keep(draft) == draft.sha256  # twice is harmless
    assert await blobs.read(draft.sha256) == b"hello, streamed blob"
    assert mode(blobs.path(draft.sha256)) == 0o600
    files = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert files == [blobs.path(draft.sha256)]
    assert [p.name for p in (tmp_path / "blobs").iterdir()] == [draft.sha256[:2]]


async def test_keeping_content_already_stored_leaves_one_file(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    sha = await blobs.put(b"same")
    async with blobs.staging() as staging:
        writer = staging.writer()
        writer.write(b"same")
        assert await staging.keep(writer.finish()) == sha
    files = [p for p in (tmp_path / "blobs").rglob("*") if p.is_file()]
    assert files == [blobs.path(sha)]


async def test_the_staging_area_goes_when_its_block_fails(tmp_path: Path) -> None:
    blobs = BlobStore(tmp_path / "blobs")
    with pytest.raises(RuntimeError):
        async with blobs.staging() as staging:
            writer = staging.writer()
            writer.write(b"x" * 100_000)
            writer.finish()
            raise RuntimeError("the run failed")
    assert list((tmp_path / "blobs").iterdir()) == []


def _egress(run_id: str, seq: int, **overrides: Any) -> EgressRecord:
    fields: dict[str, Any] = {
        "time": float(seq),
        "tenant": "t1",
        "session_id": "s1",
        "run_id": run_id,
        "capability": None,
        "method": "GET",
        "host": "api.example.com",
        "port": 443,
        "path": f"/x/{seq}?q=",
        "status": 200,
        "bytes_in": 10,
        "bytes_out": 0,
        "duration_ms": 3,
        "decision": "allow",
        "reason": "allowed by policy rule pypi",
        "resolved_ip": "93.184.216.34",
        "injected": ("github_token",),
    }
    fields.update(overrides)
    return EgressRecord(**fields)


async def test_egress_records_round_trip_oldest_first_and_filter(store_at: Path | str) -> None:
    db = await Database.open(store_at)
    try:
        await db.add_egress([_egress("r1", 1), _egress("r2", 2, session_id="s2"), _egress("r1", 3)])
        by_run = await db.list_egress(run_id="r1")
        by_session = await db.list_egress(session_id="s2")
        latest = await db.list_egress(limit=1)
    finally:
        await db.close()
    assert [r.path for r in by_run] == ["/x/1?q=", "/x/3?q="]
    assert by_run[0].injected == ("github_token",)
    assert [r.run_id for r in by_session] == ["r2"]
    assert [r.time for r in latest] == [3.0]


async def test_grants_are_recorded_and_revocation_kept_once(store_at: Path | str) -> None:
    grant = GrantRecord(
        id="tenant/t1/session/s1/cap/abc",
        tenant="t1",
        session_id="s1",
        capability="github-read",
        params={"org": "acme"},
        scope={"hosts": ["api.github.com"], "ports": [443]},
        approved_by="user",
        reason="read issues",
        created_at=1.0,
        expires_at=901.0,
    )
    db = await Database.open(store_at)
    try:
        await db.record_grant(grant)
        await db.mark_grants_revoked([grant.id], at=5.0)
        await db.mark_grants_revoked([grant.id], at=9.0)
        (stored,) = await db.list_grants(tenant="t1")
        other = await db.list_grants(tenant="t2")
    finally:
        await db.close()
    assert stored.revoked_at == 5.0
    assert stored.params == {"org": "acme"}
    assert other == []


async def test_a_write_lock_held_past_the_busy_timeout_is_a_store_error_and_the_next_call_works(
    tmp_path: Path,
) -> None:
    path = tmp_path / "airlock.db"
    db = await Database.open(path)
    try:
        # Another process's writer (e.g. `airlock gc`) holding the lock for too long.
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError, match="database is locked") as info:
                await db.create_session(session_record())
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
            other.execute("ROLLBACK")
        await db.create_session(session_record())
        assert await db.get_session("s1") == session_record()
    finally:
        await db.close()


async def test_a_file_that_is_no_database_is_refused_as_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "airlock.db"
    path.write_bytes(b"not a database, " * 512)
    with pytest.raises(StoreError, match="file is not a database"):
        await Database.open(path)
    assert path.read_bytes() == b"not a database, " * 512


async def test_opening_while_another_writer_holds_the_lock_too_long_is_a_store_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "airlock.db"
    await (await Database.open(path)).close()
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StoreError, match="database is locked"):
            await Database.open(path)
        other.execute("ROLLBACK")
    await (await Database.open(path)).close()
