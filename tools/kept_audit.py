"""Kept browsers in the records: a row when one opens (with the server keeping it), one per
call naming its browse run, and its close with the reason, so `airlock audit browsers` can
show each kept browser with its calls, and a fleet's per-tenant cap can count the open ones
every server keeps.

Belongs here: what the records are told of a kept browser. Does not belong here: the
registry and its caps (`kept_browsers`), a call's step (`browse`).
"""

from __future__ import annotations

from airlock.store import KeptBrowserRecord

from .context import Services
from .kept_browsers import KeptBrowser


async def elsewhere(services: Services, tenant: str) -> int:
    """The tenant's open kept browsers on the other servers of these records (a fleet's,
    or another server on this data directory)."""
    return await services.db.count_open_kept_browsers(tenant, except_instance=services.instance_id)


async def opened(services: Services, browser: KeptBrowser) -> None:
    await services.db.open_kept_browser(
        KeptBrowserRecord(
            id=browser.id,
            tenant=browser.tenant,
            session_id=browser.session_id,
            instance_id=services.instance_id,
            opened_at=services.clock(),
        )
    )


async def step(services: Services, browser: KeptBrowser, run_id: str) -> None:
    """The call about to run on the browser is run `run_id` (its record follows)."""
    await services.db.add_kept_browser_step(browser.id, browser.steps + 1, run_id)


async def closed(services: Services, browser: KeptBrowser) -> None:
    """After its box is gone: when, and why (the registry's `close` says)."""
    await services.db.close_kept_browser(
        browser.id, at=services.clock(), why=browser.closed_why or "closed"
    )
