"""The kept browsers' registry without an engine: its caps, its one-sentence refusals, and
what its idle sweep and a session's end close. The browsers here hold no box (the real
ones are tests/rooms/tools/test_browse_kept.py's); closing one runs its exit stack (which
removes the box, and with it the box's CA)."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any, cast

import pytest

from airlock.errors import LimitExceeded, NotFound
from airlock.policies import BrowserSettings
from airlock.tools.kept_browsers import KeptBrowser, KeptBrowsers
from airlock.tools.lasting_box import LastingBox

pytestmark = pytest.mark.anyio

T0 = 1_000_000.0


def kept(browser_id: str, session_id: str, tenant: str = "t1", idle_s: float = 300) -> KeptBrowser:
    held = LastingBox(cast(Any, None), cast(Any, None), AsyncExitStack())
    return KeptBrowser(
        id=browser_id,
        tenant=tenant,
        session_id=session_id,
        held=held,
        job=cast(Any, None),
        idle_s=idle_s,
        used_at=T0,
        capability_ids=[],
    )


def test_the_session_cap_and_the_tenant_cap_name_themselves_and_how_to_close_one() -> None:
    browsers = KeptBrowsers()
    settings = BrowserSettings(max_kept=2, max_kept_per_tenant=3)
    browsers.add(kept("brw_a", "ses_1"))
    browsers.check_room("t1", "ses_1", settings)
    browsers.add(kept("brw_b", "ses_1"))
    with pytest.raises(LimitExceeded) as session_cap:
        browsers.check_room("t1", "ses_1", settings)
    assert "[browser] max_kept limit of 2 (open: brw_a, brw_b)" in str(session_cap.value)
    assert "browse(browser_id=..., close=true)" in str(session_cap.value)
    browsers.add(kept("brw_c", "ses_2"))
    with pytest.raises(LimitExceeded, match=r"max_kept_per_tenant limit of 3; close one"):
        browsers.check_room("t1", "ses_3", settings)
    # Another tenant's count is its own.
    browsers.check_room("t2", "ses_4", settings)
    with pytest.raises(LimitExceeded, match=r"off here \(\[browser\] max_kept = 0\)"):
        browsers.check_room("t2", "ses_4", BrowserSettings(max_kept=0))
    # Those the other servers of the records keep count for the tenant too.
    browsers.check_room("t2", "ses_4", settings, elsewhere=2)
    with pytest.raises(
        LimitExceeded, match=r"keeps 3 browser\(s\) across the servers of the fleet"
    ):
        browsers.check_room("t2", "ses_4", settings, elsewhere=3)


async def test_a_foreign_an_unknown_and_a_closed_id_are_the_same_one_sentence() -> None:
    browsers = KeptBrowsers()
    browser = kept("brw_a", "ses_1")
    exited: list[str] = []
    browser.held.exits.callback(exited.append, "box removed")
    browsers.add(browser)
    assert browsers.get("t1", "ses_1", "brw_a") is browser
    messages = []
    for tenant, session_id, browser_id in (
        ("t1", "ses_2", "brw_a"),
        ("t2", "ses_1", "brw_a"),
        ("t1", "ses_1", "brw_zzz"),
    ):
        with pytest.raises(NotFound) as refused:
            browsers.get(tenant, session_id, browser_id)
        messages.append(str(refused.value).replace(browser_id, "ID"))
    await browsers.close(browser, why="closed by the test")
    with pytest.raises(NotFound) as closed:
        browsers.get("t1", "ses_1", "brw_a")
    messages.append(str(closed.value).replace("brw_a", "ID"))
    assert len(set(messages)) == 1 and ". " not in messages[0], messages
    assert exited == ["box removed"]


async def test_the_idle_sweep_spares_a_browser_in_use_and_a_sessions_end_closes_its_own() -> None:
    browsers = KeptBrowsers()
    idle, busy, fresh = (
        kept("brw_a", "ses_1", idle_s=10),
        kept("brw_b", "ses_1", idle_s=10),
        kept("brw_c", "ses_2"),
    )
    for browser in (idle, busy, fresh):
        browsers.add(browser)
    async with busy.lock:
        assert await browsers.close_idle(T0 + 11) == 1
    assert idle.closed and not busy.closed and not fresh.closed
    assert await browsers.close_session("t1", "ses_1") == 1 and busy.closed
    assert browsers.count() == 1 and not fresh.closed


async def test_a_call_on_a_browser_idle_past_its_limit_closes_it_and_is_refused() -> None:
    browsers = KeptBrowsers()
    browser = kept("brw_a", "ses_1", idle_s=10)
    browsers.add(browser)
    assert await browsers.live("t1", "ses_1", "brw_a", T0 + 9) is browser
    with pytest.raises(NotFound, match="idle past"):
        await browsers.live("t1", "ses_1", "brw_a", T0 + 10)
    assert browser.closed and browsers.count() == 0
