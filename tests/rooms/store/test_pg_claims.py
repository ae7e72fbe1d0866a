"""Replica claims on the real PostgreSQL (session-level advisory locks): a SIGKILLed
replica's claim frees and a live replica ends its runs, never a live one's; a replica whose
claim connection is killed refuses calls until it holds its lock again.

The other replicas are real processes holding a real claim (as in
tests/rooms/store/test_instances.py for the flock); the runs are in the SQLite records the
claims' `end_runs` writes to.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import postgres
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from support import run_record, session_record, wait_until

from airlock.errors import StoreError
from airlock.store import Database
from airlock.store.fleet.locks import lock_key
from airlock.store.fleet.pg_claims import (
    DEAD_GRACE_S,
    ENDED_BY_DEATH,
    AdvisoryClaim,
    EndRuns,
)

pytestmark = pytest.mark.anyio

# Claims the instance argv[2] on the database argv[1], says so, then waits.
HOLDER = """
import asyncio, sys
from airlock.store.fleet.pg_claims import AdvisoryClaim

async def main():
    async def end_runs(ids, at):
        return 0
    claim = await AdvisoryClaim.take(sys.argv[1], sys.argv[2], end_runs)
    print("claimed", flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await claim.release()

asyncio.run(main())
"""


@pytest.fixture(autouse=True)
async def _migrated(postgres_url: str) -> None:
    """The test's database as a fleet's store has it: migrated (`airlock_instances` is made
    by the store's migrations, before any replica claims)."""
    db = await Database.open(postgres_url)
    await db.close()


@asynccontextmanager
async def holder(url: str, instance_id: str) -> AsyncIterator[Process]:
    """A process holding `instance_id`'s claim until it is killed or the block ends."""
    process = await anyio.open_process([sys.executable, "-c", HOLDER, url, instance_id])
    try:
        assert process.stdout is not None
        with anyio.fail_after(60):
            said = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 100)
        assert said == b"claimed"
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.fail_after(60):
            await process.wait()
        await process.aclose()


def ender(db: Database) -> EndRuns:
    async def end_runs(instance_ids: Sequence[str], at: float) -> int:
        return await db.mark_unfinished_runs(
            instance_ids=instance_ids, status="killed", error=ENDED_BY_DEATH, finished_at=at
        )

    return end_runs


async def ended_within(claim: AdvisoryClaim, seconds: float) -> int:
    """Look for dead instances until one is found (bounded); how many runs that ended."""
    with anyio.fail_after(seconds):
        while True:
            ended = await claim.end_runs_of_dead(now=time.time())
            if ended:
                return ended
            await anyio.sleep(0.05)


async def listed(url: str) -> list[str]:
    out = await anyio.to_thread.run_sync(
        postgres.psql, url, "SELECT id FROM airlock_instances ORDER BY id"
    )
    return out.split()


async def test_a_sigkilled_replicas_runs_are_ended_by_a_live_one_and_a_live_ones_are_not(
    postgres_url: str, tmp_path: Path
) -> None:
    db = await Database.open(tmp_path / "airlock.db")
    try:
        await db.create_session(session_record())
        await db.create_run(run_record("run-of-alive", instance="inst_alive"))
        await db.create_run(run_record("run-of-dead", instance="inst_dead"))
        async with holder(postgres_url, "inst_alive"), holder(postgres_url, "inst_dead") as dead:
            mine = await AdvisoryClaim.take(postgres_url, "inst_me", ender(db))
            try:
                assert await mine.end_runs_of_dead(now=time.time()) == 0
                assert await listed(postgres_url) == ["inst_alive", "inst_dead", "inst_me"]
                dead.send_signal(signal.SIGKILL)
                with anyio.fail_after(60):
                    await dead.wait()
                killed = time.monotonic()
                # Its socket closed with it: PostgreSQL frees the lock as soon as it sees,
                # and its runs are ended once the lock stayed free for the grace (by then a
                # replica that was only cut off has stopped its sandboxes itself).
                assert await ended_within(mine, DEAD_GRACE_S + 10) == 1
                assert time.monotonic() - killed >= DEAD_GRACE_S
                assert await listed(postgres_url) == ["inst_alive", "inst_me"]
            finally:
                await mine.release()
        record = await db.get_run("run-of-dead")
        assert record is not None and (record.status, record.error) == ("killed", ENDED_BY_DEATH)
        assert await db.get_run("run-of-alive") == run_record("run-of-alive", instance="inst_alive")
        # Released: unlisted (the other holder, killed at the block's end, stays listed
        # until a live replica's scan finds it dead).
        assert await listed(postgres_url) == ["inst_alive"]
    finally:
        await db.close()


async def test_one_instance_cannot_be_claimed_twice(postgres_url: str, tmp_path: Path) -> None:
    db = await Database.open(tmp_path / "airlock.db")
    try:
        async with holder(postgres_url, "inst_a"):
            with pytest.raises(StoreError, match="already claimed"):
                await AdvisoryClaim.take(postgres_url, "inst_a", ender(db))
    finally:
        await db.close()


async def test_a_replica_whose_claim_connection_dies_refuses_calls_until_it_holds_it_again(
    postgres_url: str, tmp_path: Path
) -> None:
    db = await Database.open(tmp_path / "airlock.db")
    try:
        mine = await AdvisoryClaim.take(postgres_url, "inst_me", ender(db))
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(mine.serve)
                mine.check()
                pid = mine.backend_pid
                await anyio.to_thread.run_sync(
                    postgres.psql, postgres_url, f"SELECT pg_terminate_backend({pid})"
                )
                await wait_until(lambda: mine.lost, within=10)
                with pytest.raises(StoreError, match="lost its connection to the database"):
                    mine.check()
                await wait_until(lambda: not mine.lost, within=20)
                mine.check()
                assert mine.backend_pid not in (None, pid)
                # Held again: nobody else can take it.
                taken = await anyio.to_thread.run_sync(
                    postgres.psql,
                    postgres_url,
                    f"SELECT pg_try_advisory_lock({lock_key('inst_me')})",
                )
                assert taken.strip() == "f"
                assert await listed(postgres_url) == ["inst_me"]
                tg.cancel_scope.cancel()
        finally:
            await mine.release()
    finally:
        await db.close()


async def test_the_fleets_replicas_show_which_claims_are_held_and_when_they_last_beat(
    postgres_url: str, tmp_path: Path
) -> None:
    db = await Database.open(postgres_url)
    sqlite = await Database.open(tmp_path / "airlock.db")
    try:
        assert db.is_fleet and not sqlite.is_fleet
        assert await sqlite.list_replicas() == []
        async with holder(postgres_url, "inst_alive"), holder(postgres_url, "inst_dead") as dead:
            before = time.time()
            replicas = await db.list_replicas()
            assert [(r.id, r.live) for r in replicas] == [("inst_alive", True), ("inst_dead", True)]
            assert all(r.holder_pid and r.last_heartbeat for r in replicas)
            dead.send_signal(signal.SIGKILL)
            with anyio.fail_after(60):
                await dead.wait()

            async def freed() -> bool:
                return [r.live for r in await db.list_replicas()] == [True, False]

            for _ in range(200):  # polled: PostgreSQL frees the lock once it sees the close
                if await freed():
                    break
                await anyio.sleep(0.05)
            else:
                pytest.fail("the SIGKILLed replica's lock was not freed within 10 s")
            alive, gone = await db.list_replicas()
            assert alive.holder_pid is not None and alive.last_heartbeat is not None
            assert alive.last_heartbeat <= before
            assert (gone.holder_pid, gone.last_heartbeat) == (None, None)
    finally:
        await db.close()
        await sqlite.close()
