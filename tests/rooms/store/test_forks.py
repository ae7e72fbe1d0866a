"""Forks and restores of a session workspace on the real store (SQLite and PostgreSQL):
a fork starts at a version with the same blobs and none copied, the two then go their own
ways, and a restore is a new version equal to an old one, history kept."""

from __future__ import annotations

import pytest
from support import session_record, ws_file

from airlock.errors import InvalidRequest
from airlock.store import Database, SessionRecord, WorkspaceDelta, WorkspaceFile

pytestmark = pytest.mark.anyio


async def write(
    db: Database, session: str, *files: WorkspaceFile, deletes: tuple[str, ...] = ()
) -> int:
    head = await db.workspace_head(session)
    commit = await db.commit_workspace(
        session,
        WorkspaceDelta(base_version=head.version, upserts=files, deletes=deletes),
        writer="run_x",
        at=1.0,
    )
    return commit.version


def fork_of(parent: str, child: str, version: int) -> SessionRecord:
    base = session_record(child)
    return base.model_copy(update={"parent_id": parent, "parent_version": version})


def paths(files: tuple[WorkspaceFile, ...]) -> dict[str, str]:
    return {f.path: f.sha256 for f in files}


async def test_a_fork_starts_at_the_version_and_the_two_go_their_own_ways(db: Database) -> None:
    await db.create_session(session_record("p"))
    await write(db, "p", ws_file("a.txt", "1"))
    v2 = await write(db, "p", ws_file("b.txt", "2"))
    await write(db, "p", ws_file("c.txt", "3"), deletes=("a.txt",))

    await db.fork_session(fork_of("p", "f", v2), at=2.0)
    fork = await db.workspace_head("f")
    assert fork.version == v2
    assert paths(fork.files) == paths((ws_file("a.txt", "1"), ws_file("b.txt", "2")))
    record = await db.get_session("f")
    assert record is not None and (record.parent_id, record.parent_version) == ("p", v2)

    await write(db, "f", ws_file("only-fork.txt", "4"))
    assert "only-fork.txt" not in paths((await db.workspace_head("p")).files)
    assert set(paths((await db.workspace_head("f")).files)) == {"a.txt", "b.txt", "only-fork.txt"}


async def test_a_fork_at_a_version_the_parent_lacks_is_refused_naming_its_versions(
    db: Database,
) -> None:
    await db.create_session(session_record("p"))
    with pytest.raises(InvalidRequest, match="versions are 0 to 0"):
        await db.fork_session(fork_of("p", "f", 3), at=2.0)
    assert await db.get_session("f") is None


async def test_a_restore_is_a_new_version_equal_to_the_old_one(db: Database) -> None:
    await db.create_session(session_record("p"))
    v1 = await write(db, "p", ws_file("a.txt", "1"))
    await write(db, "p", ws_file("a.txt", "changed"), ws_file("b.txt", "2"))
    restored = await db.restore_workspace("p", v1, writer="restore of version 1", at=3.0)
    head = await db.workspace_head("p")
    assert restored.version == head.version == 3
    assert paths(head.files) == paths((ws_file("a.txt", "1"),))
    # History is kept: version 2 can still be restored, and forked.
    await db.restore_workspace("p", 2, writer="restore of version 2", at=4.0)
    assert set(paths((await db.workspace_head("p")).files)) == {"a.txt", "b.txt"}
    await db.fork_session(fork_of("p", "f", 2), at=5.0)
    assert set(paths((await db.workspace_head("f")).files)) == {"a.txt", "b.txt"}


async def test_a_fork_restores_only_its_own_versions(db: Database) -> None:
    await db.create_session(session_record("p"))
    await write(db, "p", ws_file("a.txt", "1"))
    v2 = await write(db, "p", ws_file("b.txt", "2"))
    await db.fork_session(fork_of("p", "f", v2), at=2.0)
    await write(db, "f", ws_file("c.txt", "3"))
    with pytest.raises(InvalidRequest, match="fork that session"):
        await db.restore_workspace("f", 1, writer="restore of version 1", at=3.0)
    await db.restore_workspace("f", v2, writer="restore of version 2", at=3.0)
    assert set(paths((await db.workspace_head("f")).files)) == {"a.txt", "b.txt"}
