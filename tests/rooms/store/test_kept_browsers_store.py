"""The kept browsers' records (`tools/kept_audit.py` writes them), on SQLite and PostgreSQL:
a browser with its calls in order and how each run ended, its first close kept, the count of
a tenant's open ones on the other servers (the fleet's cap), and a dead server's browsers
closed with its runs in one transaction."""

from __future__ import annotations

import pytest
from support import run_record, session_record

from airlock.store import Database, KeptBrowserRecord
from airlock.store.queries.browsers import LOST

pytestmark = pytest.mark.anyio


def kept(browser_id: str, *, tenant: str = "t1", instance: str = "i1") -> KeptBrowserRecord:
    return KeptBrowserRecord(
        id=browser_id,
        tenant=tenant,
        session_id="s1",
        instance_id=instance,
        opened_at=300.0 + len(browser_id),
    )


async def test_a_browser_lists_its_calls_in_order_and_keeps_its_first_close(db: Database) -> None:
    await db.create_session(session_record("s1"))
    await db.create_run(run_record("run_1"))
    await db.open_kept_browser(kept("brw_a"))
    await db.add_kept_browser_step("brw_a", 1, "run_1")
    # The second call's run is not recorded (yet): the step still lists it.
    await db.add_kept_browser_step("brw_a", 2, "run_2")
    await db.close_kept_browser("brw_a", at=400.0, why="closed by its session (close=true)")
    await db.close_kept_browser("brw_a", at=500.0, why="idle past [browser] keep_idle_s")
    [browser] = await db.list_kept_browsers(tenant="t1")
    assert (browser.closed_at, browser.closed_why) == (400.0, "closed by its session (close=true)")
    assert [(s.step, s.run_id, s.status) for s in browser.steps] == [
        (1, "run_1", "running"),
        (2, "run_2", None),
    ]
    assert await db.kept_browser_step_of("run_2") == ("brw_a", 2)
    assert await db.kept_browser_step_of("run_elsewhere") is None
    assert await db.list_kept_browsers(tenant="t2") == []
    assert await db.list_kept_browsers(session_id="s9") == []


async def test_the_open_count_leaves_out_this_server_closed_ones_and_other_tenants(
    db: Database,
) -> None:
    await db.open_kept_browser(kept("brw_mine", instance="i1"))
    await db.open_kept_browser(kept("brw_peer", instance="i2"))
    await db.open_kept_browser(kept("brw_peer2", instance="i2"))
    await db.open_kept_browser(kept("brw_other", tenant="t2", instance="i2"))
    await db.close_kept_browser("brw_peer2", at=400.0, why="its session ended")
    assert await db.count_open_kept_browsers("t1", except_instance="i1") == 1
    assert await db.count_open_kept_browsers("t1", except_instance="i2") == 1
    assert await db.count_open_kept_browsers("t2", except_instance="i1") == 1


async def test_a_dead_servers_browsers_close_with_its_runs(db: Database) -> None:
    await db.open_kept_browser(kept("brw_dead", instance="i2"))
    await db.open_kept_browser(kept("brw_live", instance="i1"))
    await db.mark_unfinished_runs(
        instance_ids=["i2"], status="killed", error="its server died", finished_at=450.0
    )
    shown = {b.id: (b.closed_at, b.closed_why) for b in await db.list_kept_browsers()}
    assert shown == {"brw_dead": (450.0, LOST), "brw_live": (None, None)}
    assert await db.count_open_kept_browsers("t1", except_instance="i1") == 0
