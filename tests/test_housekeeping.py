"""The server's housekeeping loop: ended grants and expired run tokens do not pile up.

No container is involved: the loop runs on the real store, broker and an engine that was
never started, with a clock the test moves.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from support import wait_until
from test_grants import T0
from test_grants import make as make_grant

from airlock.broker import Grants, RunTokens, Vault, load_key, vault_path
from airlock.egress import Egress
from airlock.policies import Policy
from airlock.sandbox.instance import Instance
from airlock.server.engine import Engine
from airlock.server.running import _housekeeping
from airlock.server.sessions import Leases
from airlock.store import BlobStore, Database
from airlock.tools import Services

pytestmark = pytest.mark.anyio


async def test_housekeeping_forgets_ended_grants_and_expired_run_tokens(tmp_path: Path) -> None:
    now = [T0]
    policy = Policy()
    db = await Database.open(tmp_path / "airlock.db")
    try:
        grants = Grants(max_per_session=3, max_live_per_tenant=5)
        tokens = RunTokens()
        vault = Vault(vault_path(tmp_path), load_key(tmp_path, {}))
        engine = Engine(policy, Instance.current())
        services = Services(
            db=db,
            blobs=BlobStore(tmp_path / "blobs"),
            engine=engine,
            policy=policy,
            grants=grants,
            tokens=tokens,
            vault=vault,
            egress=Egress(settings=policy.egress, grants=grants, tokens=tokens, vault=vault),
            instance_id="test",
            clock=lambda: now[0],
        )
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
        now[0] = T0 + 11
        async with anyio.create_task_group() as tg:
            tg.start_soon(_housekeeping, Leases(services), engine, 0.01)
            await wait_until(lambda: grants.all() == [live], within=10)
            tg.cancel_scope.cancel()
        # Already forgotten by the loop, so nothing is left to drop.
        assert tokens.forget_expired(now[0]) == 0
    finally:
        await db.close()
