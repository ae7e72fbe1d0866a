"""The server's housekeeping loop: ended grants and expired run tokens do not pile up, and
a dead server's runs do not stay `running` while a live one serves.

No container is involved: the loop runs on the real store, broker and an engine that was
never started, with a clock the test moves; the other servers are real processes holding
(or having held) an instance claim.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from support import (
    T0,
    clocked_services,
    holder,
    make_grant,
    run_record,
    session_record,
    wait_until,
)

from airlock.server.engine import Engine
from airlock.server.running import _housekeeping
from airlock.server.sessions import Leases
from airlock.store.fleet.claims import ENDED_BY_DEATH, FileClaim, claim
from airlock.tools import Services

pytestmark = pytest.mark.anyio

NOW = [T0]


@pytest.fixture
async def services(tmp_path: Path) -> AsyncIterator[Services]:
    """The real store, broker and an engine that is never started, on the clock `NOW`."""
    async with clocked_services(tmp_path, NOW) as services:
        yield services


@asynccontextmanager
async def housekeeping(services: Services, instances_dir: Path) -> AsyncIterator[None]:
    """The loop, ticking every 10 ms, for the duration of the block."""
    # This server's own claim, taken without ending anyone's runs: that is the loop's job.
    engine = services.engine
    assert isinstance(engine, Engine)  # the loop takes the server's own engine
    mine = FileClaim(claim(instances_dir, services.instance_id), services.db, services.blobs)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_housekeeping, Leases(services, mine), engine, 0.01, mine)
            yield
            tg.cancel_scope.cancel()
    finally:
        await mine.release()


async def test_housekeeping_forgets_ended_grants_and_expired_run_tokens(
    services: Services, tmp_path: Path
) -> None:
    grants, tokens = services.grants, services.tokens
    ended = make_grant(grants, session_id="s1", ttl_s=10, now=T0)
    live = make_grant(grants, session_id="s2", ttl_s=100, now=T0)
    tokens.mint(
        tenant="t1",
        session_id="s1",
        run_id="run_1",
        grant_ids=[ended.id],
        expires_at=T0 + 10,
        now=T0,
    )
    NOW[0] = T0 + 11
    async with housekeeping(services, tmp_path / "instances"):
        await wait_until(lambda: grants.all() == [live], within=10)
    # Already forgotten by the loop, so nothing is left to drop.
    assert tokens.forget_expired(NOW[0]) == 0


async def test_housekeeping_ends_the_runs_of_a_server_that_died_and_not_a_live_ones(
    services: Services, tmp_path: Path
) -> None:
    directory = tmp_path / "instances"
    db = services.db
    await db.create_session(session_record())
    await db.create_run(run_record("run-of-alive", instance="alive"))
    await db.create_run(run_record("run-of-dead", instance="dead"))
    async with holder(directory, "alive"), holder(directory, "dead") as dead:
        dead.send_signal(signal.SIGKILL)
        with anyio.fail_after(60):
            await dead.wait()
        async with housekeeping(services, directory):
            # Forgotten only once its runs are ended.
            await wait_until(lambda: not (directory / "dead.lock").exists(), within=30)
        ended = await db.get_run("run-of-dead")
        assert ended is not None
        assert (ended.status, ended.error) == ("killed", ENDED_BY_DEATH)
        assert await db.get_run("run-of-alive") == run_record("run-of-alive", instance="alive")
        assert [p.name for p in directory.glob("*.lock")] == ["alive.lock"]
