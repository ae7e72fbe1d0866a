"""Kept browsers: a session's browser boxes that live across `browse` calls.

`browse(keep=true)` leaves its box running (its driver waits for the next job on the same
stream, `Sandbox.step`) and registers it here under a `browser_id`; later calls of the same
session continue on its page, one at a time (each browser's lock). A kept browser is
closed by `browse(close=true)`, its session's end (an entry of `session_end.STOPS`: so
also idle and lifetime limits, shutdown and a replica leaving), its own idle limit
(`[browser] keep_idle_s`, the housekeeping sweep) or its box ending (a timeout, a crash).

The box is the same box a one-shot browse gets: no secret, no workspace file, no hatch
root ever reaches it. Its network is opened afresh for each call (a new run and proxy,
with the grants the session holds then), over the CA made with the box (`Sandbox.ca`),
because the box trusts only the CA it was started with, and with one token value bound to
each step's run in turn, because its Chromium presents the credentials it answered the
first challenge with (a new value would meet a 407 every step).

Belongs here: the registry, the caps, closing. Does not belong here: what a call does on
the box (`browse`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import anyio

from airlock.broker import Secret
from airlock.errors import LimitExceeded, NotFound
from airlock.policies import BrowserSettings
from airlock.sandbox import JobSpec

from .lasting_box import LastingBox

log = logging.getLogger(__name__)

MAX_SHOWN_ID_CHARS = 40
IDLE = "idle past [browser] keep_idle_s"


@dataclass(eq=False)
class KeptBrowser:
    """One kept browser: its box (with the CA it trusts), the capabilities named for it,
    the job its steps are made from, and the token value its Chromium presents."""

    id: str
    tenant: str
    session_id: str
    held: LastingBox
    job: JobSpec
    idle_s: float
    used_at: float
    capability_ids: list[str]
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    closed: bool = False
    steps: int = 0
    token: Secret | None = None
    closed_why: str | None = None


class KeptBrowsers:
    """Every kept browser of this server, by id."""

    def __init__(self) -> None:
        self._open: dict[str, KeptBrowser] = {}

    def check_room(
        self, tenant: str, session_id: str, settings: BrowserSettings, *, elsewhere: int = 0
    ) -> None:
        """LimitExceeded, naming the cap and how to close one, when another would be over.
        `elsewhere`: the tenant's open kept browsers on the other servers of the records
        (the store's count), which the per-tenant cap counts too."""
        if settings.max_kept == 0:
            raise LimitExceeded(
                "keeping a browser is off here ([browser] max_kept = 0); browse without keep"
            )
        mine = [b for b in self._open.values() if b.session_id == session_id]
        if len(mine) >= settings.max_kept:
            shown = ", ".join(b.id for b in mine) or "none"
            raise LimitExceeded(
                f"this session already keeps {len(mine)} browser(s), the [browser] max_kept "
                f"limit of {settings.max_kept} (open: {shown}); close one with "
                "browse(browser_id=..., close=true), or browse without keep"
            )
        tenants = sum(1 for b in self._open.values() if b.tenant == tenant) + elsewhere
        if tenants >= settings.max_kept_per_tenant:
            where = "across the servers of the fleet" if elsewhere else "on this server"
            raise LimitExceeded(
                f"this tenant already keeps {tenants} browser(s) {where}, the "
                f"[browser] max_kept_per_tenant limit of {settings.max_kept_per_tenant}; "
                "close one with browse(browser_id=..., close=true), or browse without keep"
            )

    def add(self, browser: KeptBrowser) -> None:
        self._open[browser.id] = browser

    def get(self, tenant: str, session_id: str, browser_id: str) -> KeptBrowser:
        """The session's open kept browser `browser_id`, or one sentence saying it is none
        (another session's is not told apart from an unknown one)."""
        browser = self._open.get(browser_id)
        if browser is None or browser.session_id != session_id or browser.tenant != tenant:
            shown = browser_id[:MAX_SHOWN_ID_CHARS]
            raise NotFound(
                f"browser_id {shown!r} is not a browser this session keeps open (unknown, "
                "closed, idle past [browser] keep_idle_s, another session's, or kept by another "
                "server of the fleet: a kept browser lives on the server that opened it); open one "
                "with browse(url=..., keep=true)"
            )
        return browser

    async def live(self, tenant: str, session_id: str, browser_id: str, now: float) -> KeptBrowser:
        """`get`, but one idle past its limit is closed here and refused like a closed one
        (the sweep may not have come by yet)."""
        browser = self.get(tenant, session_id, browser_id)
        if not browser.lock.locked() and now - browser.used_at >= browser.idle_s:
            await self.close(browser, why=IDLE)
        return self.get(tenant, session_id, browser_id)

    def count(self) -> int:
        return len(self._open)

    def by_tenant(self) -> dict[str, int]:
        """How many are open per tenant (the metrics' gauge)."""
        counts: dict[str, int] = {}
        for browser in self._open.values():
            counts[browser.tenant] = counts.get(browser.tenant, 0) + 1
        return counts

    async def close(self, browser: KeptBrowser, *, why: str) -> None:
        """Remove its box (and with it its CA); it is gone from the registry at once. `why`
        is what the records keep of its end."""
        if self._open.get(browser.id) is browser:
            del self._open[browser.id]
        if browser.closed:
            return
        browser.closed = True
        browser.closed_why = why
        await browser.held.close()

    async def close_session(self, tenant: str, session_id: str) -> int:
        """Close every kept browser of the session; how many there were."""
        doomed = [
            b for b in self._open.values() if b.session_id == session_id and b.tenant == tenant
        ]
        await self._close_all(doomed, why="its session ended or left this server")
        return len(doomed)

    async def close_idle(self, now: float) -> int:
        """Close those unused for their idle limit (not one a call is using); a failure is
        logged, not raised: the housekeeping sweep that calls this goes on."""
        doomed = [
            b for b in self._open.values() if not b.lock.locked() and now - b.used_at >= b.idle_s
        ]
        await self._close_all(doomed, why=IDLE, raising=False)
        return len(doomed)

    async def _close_all(
        self, doomed: list[KeptBrowser], *, why: str, raising: bool = True
    ) -> None:
        failure: Exception | None = None
        for browser in doomed:
            try:
                await self.close(browser, why=why)
            except Exception as exc:
                log.error("closing kept browser %s failed", browser.id, exc_info=exc)
                failure = failure or exc
        if failure is not None and raising:
            raise failure
