"""Fencing a fleet's replicas on the real PostgreSQL: a replica cut off from the database
stops its own sandboxes before any peer may end their runs; a peer then ends them `killed`;
and what the cut-off replica writes once the network heals (the run's end, its files) is
refused, because the record is no longer open under its claim. Runs whose owner has no
current claim are swept, and quotas count only runs whose owner's claim lives.

The replica under test reaches PostgreSQL through `relay` (tests/relay.py), cut so that
PostgreSQL sees it go while it sees nothing (the issue's partition); its peer and the
records connect directly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import anyio
import postgres
import pytest
from relay import relayed
from support import run_record, session_record, wait_until, ws_file

from airlock.errors import RunEndedByFleet
from airlock.store import ArtifactRecord, Database, WorkspaceDelta
from airlock.store.database import ENDED_BY_FENCING
from airlock.store.fleet.pg_claims import (
    DEAD_GRACE_S,
    ENDED_BY_DEATH,
    FENCE_DEADLINE_S,
    AdvisoryClaim,
    EndRuns,
)

pytestmark = pytest.mark.anyio

SWEPT = "swept in a test"


@pytest.fixture
async def db(postgres_url: str) -> Database:
    records = await Database.open(postgres_url)
    await records.create_session(session_record("s1"))
    return records


def ender(db: Database) -> EndRuns:
    async def end_runs(instance_ids: Sequence[str], at: float) -> int:
        return await db.mark_unfinished_runs(
            instance_ids=instance_ids, status="killed", error=ENDED_BY_DEATH, finished_at=at
        )

    return end_runs


async def no_runs_ended(_ids: Sequence[str], _at: float) -> int:
    return 0


def artifact(run_id: str) -> ArtifactRecord:
    return ArtifactRecord(
        run_id=run_id,
        path="out.txt",
        size=1,
        sha256=ws_file("out.txt").sha256,
        mime_type="text/plain",
        tenant="t1",
        created_at=300.0,
    )


async def test_a_fenced_replica_stops_its_runs_before_a_peer_ends_them_and_its_late_end_is_refused(
    db: Database, postgres_url: str
) -> None:
    fenced: list[float] = []

    async def fence() -> None:
        fenced.append(time.monotonic())

    try:
        async with relayed(postgres_url) as (relay, through):
            a = await AdvisoryClaim.take(through, "inst_a", ender(db), fence=fence)
            b = await AdvisoryClaim.take(postgres_url, "inst_b", ender(db))
            try:
                await db.create_run(run_record("run_a", instance="inst_a"))
                started = await db.get_run("run_a")
                assert started is not None and started.claim_epoch == a.epoch > 0
                async with anyio.create_task_group() as tg:
                    await tg.start(a.serve)
                    await relay.cut(close_upstream=True)
                    cut = time.monotonic()
                    with anyio.fail_after(DEAD_GRACE_S + 15):
                        while True:  # B's housekeeping, polled
                            if await b.end_runs_of_dead(now=time.time()):
                                break
                            await anyio.sleep(0.1)
                    ended = time.monotonic()
                    # A stopped its sandboxes before B could declare them dead.
                    assert fenced, "the cut-off replica never fenced"
                    assert fenced[0] - cut <= FENCE_DEADLINE_S < DEAD_GRACE_S <= ended - cut
                    relay.heal()
                    await wait_until(lambda: not a.lost, within=10)
                    assert a.epoch != started.claim_epoch
                    # A's call finishes now, the network back: its `ok` and its files are
                    # refused, and the record keeps B's verdict.
                    late = started.model_copy(update={"status": "ok", "exit_code": 0})
                    with pytest.raises(RunEndedByFleet, match="run_a `killed`"):
                        await db.finish_run(late)
                    delta = WorkspaceDelta(base_version=0, upserts=(ws_file("out.txt"),))
                    with pytest.raises(RunEndedByFleet, match="nothing of it landed"):
                        await db.commit_run("s1", "run_a", [artifact("run_a")], delta, at=1.0)
                    tg.cancel_scope.cancel()
            finally:
                await b.release()
                with anyio.move_on_after(10):
                    await a.release()
        record = await db.get_run("run_a")
        assert record is not None and (record.status, record.error) == ("killed", ENDED_BY_DEATH)
        head = await db.workspace_head("s1")
        assert (head.version, head.files) == (0, ())
        assert await db.list_artifacts("run_a") == []
    finally:
        await db.close()


async def test_an_open_run_under_the_current_claim_ends_and_commits_once(
    db: Database, postgres_url: str
) -> None:
    """The conditions let the owner's own end through, once: a second end is refused."""
    a = await AdvisoryClaim.take(postgres_url, "inst_a", no_runs_ended)
    try:
        await db.create_run(run_record("run_a", instance="inst_a"))
        delta = WorkspaceDelta(base_version=0, upserts=(ws_file("out.txt"),))
        commit = await db.commit_run("s1", "run_a", [artifact("run_a")], delta, at=1.0)
        assert commit.version == 1
        done = run_record("run_a", instance="inst_a").model_copy(update={"status": "ok"})
        await db.finish_run(done)
        with pytest.raises(RunEndedByFleet, match="run_a `ok`"):
            await db.finish_run(done.model_copy(update={"status": "killed"}))
        record = await db.get_run("run_a")
        assert record is not None and record.status == "ok"
    finally:
        await a.release()
        await db.close()


async def test_a_replica_whose_lock_is_free_writes_no_result_and_its_run_ends_killed(
    db: Database, postgres_url: str
) -> None:
    """Between losing its claim and any peer's verdict, a replica's end is refused too (its
    lock is not held): the record, still `running`, ends `killed`, never `ok`."""
    a = await AdvisoryClaim.take(postgres_url, "inst_a", no_runs_ended)
    try:
        await db.create_run(run_record("run_a", instance="inst_a"))
        await anyio.to_thread.run_sync(
            postgres.psql, postgres_url, f"SELECT pg_terminate_backend({a.backend_pid}, 5000)"
        )
        delta = WorkspaceDelta(base_version=0, upserts=(ws_file("out.txt"),))
        with pytest.raises(RunEndedByFleet, match="run_a `running`"):
            await db.commit_run("s1", "run_a", [artifact("run_a")], delta, at=1.0)
        late = run_record("run_a", instance="inst_a").model_copy(update={"status": "ok"})
        with pytest.raises(RunEndedByFleet, match=f"run_a `killed` \\({ENDED_BY_FENCING}\\)"):
            await db.finish_run(late)
        record = await db.get_run("run_a")
        assert record is not None and (record.status, record.error) == ("killed", ENDED_BY_FENCING)
        assert (await db.workspace_head("s1")).version == 0
    finally:
        with anyio.move_on_after(10):
            await a.release()
        await db.close()


async def test_the_sweep_ends_runs_whose_owner_has_no_current_claim_and_quotas_count_live_runs(
    db: Database, postgres_url: str
) -> None:
    live = await AdvisoryClaim.take(postgres_url, "inst_live", no_runs_ended)
    dead = await AdvisoryClaim.take(postgres_url, "inst_dead", no_runs_ended)
    try:
        for run_id, owner in [
            ("run_live", "inst_live"),
            ("run_stale", "inst_live"),
            ("run_dead", "inst_dead"),
            ("run_gone", "inst_gone"),  # an owner that never listed a claim, or was unlisted
        ]:
            assert await db.create_run(run_record(run_id, instance=owner))
        # run_stale's owner lost its claim and took it again since: a new epoch.
        await anyio.to_thread.run_sync(
            postgres.psql,
            postgres_url,
            "UPDATE runs SET claim_epoch = claim_epoch - 1000 WHERE id = 'run_stale'",
        )
        # inst_dead's connection ends: its lock is free, its row still listed.
        dead_pid = dead.backend_pid
        await anyio.to_thread.run_sync(
            postgres.psql, postgres_url, f"SELECT pg_terminate_backend({dead_pid}, 5000)"
        )
        # Only run_live counts: a second live run fits under 2, a third does not.
        assert await db.create_run(run_record("run_2", instance="inst_live"), max_running=2)
        assert not await db.create_run(run_record("run_3", instance="inst_live"), max_running=2)
        assert await db.end_orphaned_runs(error=SWEPT, finished_at=500.0) == 2
        status = {r.id: (r.status, r.error) for r in await db.list_runs()}
        assert status == {
            "run_live": ("running", None),
            "run_2": ("running", None),
            "run_stale": ("killed", SWEPT),
            "run_gone": ("killed", SWEPT),
            # A listed claim whose lock is free is the dead-instance scan's, after its grace.
            "run_dead": ("running", None),
        }
    finally:
        await live.release()
        with anyio.move_on_after(10):
            await dead.release()
        await db.close()


async def test_the_sweep_ends_nothing_on_sqlite(tmp_path: Path) -> None:
    """One server's records list no claim: its flocks find the dead (`fleet/claims.py`)."""
    db = await Database.open(tmp_path / "airlock.db")
    try:
        await db.create_session(session_record("s1"))
        await db.create_run(run_record("run_1", instance="inst_other"))
        assert await db.end_orphaned_runs(error=SWEPT, finished_at=1.0) == 0
    finally:
        await db.close()
