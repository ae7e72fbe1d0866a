"""Server instances in a shared data dir: a dead one's runs are ended, a live one's never.

The other servers are real processes holding (or having held) a real claim: one that waits
stays alive, one that got SIGKILL is dead. The end to end version, with `airlock serve`
and containers, is in tests/rooms/server/test_stdio.py.
"""

from __future__ import annotations

import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from stores import old_database
from support import holder, run_record, session_record

from airlock.store import SCHEMA_VERSION, BlobStore, Database, claim_instance
from airlock.store.fleet.claims import ENDED_BY_DEATH, claim

pytestmark = pytest.mark.anyio


async def test_a_dead_instances_runs_are_ended_and_a_live_ones_are_not(
    tmp_path: Path, store_at: Path | str
) -> None:
    directory = tmp_path / "instances"
    db = await Database.open(store_at)
    try:
        await db.create_session(session_record())
        for owner in ("alive", "dead", "new"):
            await db.create_run(run_record(f"run-of-{owner}", instance=owner))
        async with holder(directory, "alive"), holder(directory, "dead") as dead:
            dead.send_signal(signal.SIGKILL)
            with anyio.fail_after(60):
                assert await dead.wait() == -signal.SIGKILL

            mine = await claim_instance(
                db, BlobStore(tmp_path / "blobs"), directory, "new", now=500.0
            )

            ended = await db.get_run("run-of-dead")
            assert ended is not None
            assert (ended.status, ended.error, ended.finished_at) == (
                "killed",
                ENDED_BY_DEATH,
                500.0,
            )
            assert await db.get_run("run-of-alive") == run_record("run-of-alive", instance="alive")
            # A run of this very instance is its own to end.
            assert await db.get_run("run-of-new") == run_record("run-of-new", instance="new")
            # The dead one is forgotten; the live one and this one stay claimed.
            assert sorted(p.name for p in directory.glob("*.lock")) == ["alive.lock", "new.lock"]
            mine.release(forget=True)
            assert [p.name for p in directory.glob("*.lock")] == ["alive.lock"]
    finally:
        await db.close()


def staged(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith(".staging-"))


async def test_the_staging_of_dead_and_ownerless_servers_is_removed_and_a_live_ones_kept(
    tmp_path: Path,
    store_at: Path | str,
) -> None:
    directory = tmp_path / "instances"
    root = tmp_path / "blobs"
    db = await Database.open(store_at)
    try:
        async with (
            holder(directory, "alive"),
            holder(directory, "dead") as dead,
            BlobStore(root, owner="alive").staging(),
            BlobStore(root, owner="dead").staging(),
            BlobStore(root).staging(),  # as an Airlock before owners named it
        ):
            dead.send_signal(signal.SIGKILL)
            with anyio.fail_after(60):
                assert await dead.wait() == -signal.SIGKILL
            assert len(staged(root)) == 3

            mine = await claim_instance(db, BlobStore(root, owner="new"), directory, "new", now=1.0)
            mine.release(forget=True)

            left = staged(root)
            assert len(left) == 1 and left[0].startswith(".staging-alive-")
    finally:
        await db.close()


async def test_two_claims_in_one_process_are_both_alive(
    tmp_path: Path, store_at: Path | str
) -> None:
    # flock is per open file, not per process: a server's own claim is never taken over,
    # even by a second server in the same process (as tests build them).
    directory = tmp_path / "instances"
    db = await Database.open(store_at)
    try:
        await db.create_session(session_record())
        await db.create_run(run_record("first-run", instance="first"))
        first = await claim_instance(db, BlobStore(tmp_path / "blobs"), directory, "first", now=1.0)
        second = await claim_instance(
            db, BlobStore(tmp_path / "blobs"), directory, "second", now=2.0
        )
        assert await db.get_run("first-run") == run_record("first-run", instance="first")
        second.release(forget=True)
        first.release(forget=True)
    finally:
        await db.close()


async def test_a_released_claim_that_is_kept_is_taken_over_by_the_next_server(
    tmp_path: Path,
    store_at: Path | str,
) -> None:
    # What a server leaves when ending a dead one's runs failed: the file, unlocked.
    directory = tmp_path / "instances"
    claim(directory, "crashed").release(forget=False)
    db = await Database.open(store_at)
    try:
        await db.create_session(session_record())
        await db.create_run(run_record("left", instance="crashed"))
        (
            await claim_instance(db, BlobStore(tmp_path / "blobs"), directory, "next", now=3.0)
        ).release(forget=True)
        left = await db.get_run("left")
        assert left is not None and left.status == "killed"
        assert list(directory.glob("*.lock")) == []
    finally:
        await db.close()


async def test_a_schema_3_database_opens_and_its_unowned_running_runs_end_at_the_next_claim(
    tmp_path: Path,
) -> None:
    # The database as Airlock of schema 3 wrote it: runs had no owner.
    path = old_database(tmp_path / "airlock.db")
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("ALTER TABLE runs DROP COLUMN instance_id")
        conn.execute("PRAGMA user_version = 3")
        conn.commit()

    db = await Database.open(path)
    try:
        # The dump's r1 is still running, r2 finished ok.
        before = await db.get_run("r1")
        assert before is not None and (before.status, before.instance_id) == ("running", "")
        done = await db.get_run("r2")
        assert done is not None and (done.status, done.instance_id) == ("ok", "")
        (
            await claim_instance(
                db, BlobStore(tmp_path / "blobs"), tmp_path / "instances", "new", now=400.0
            )
        ).release(forget=True)
        after = await db.get_run("r1")
        assert after is not None
        assert (after.status, after.error) == ("killed", ENDED_BY_DEATH)
        assert await db.get_run("r2") == done
    finally:
        await db.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
