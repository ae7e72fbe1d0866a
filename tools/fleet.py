"""What a fleet notice does on this server, and the check that does not wait for one.

Every server of a fleet takes the local half of a change another server recorded, when its
notice (`store/fleet/notices.py`) arrives. For `grant_revoked` that is here: the grants are revoked
in this server's broker, so its proxies' watchers cut what they carry within
`egress.proxy.WATCH_INTERVAL` and refuse the next request. A notice is only a hint (anyone
who may connect can send one): only the grants live here of the notice's tenant whose
records say they are revoked are (`take_revocation`). For `session_ended` it is the
leases' (`server/sessions.py`, the one owner of a session's end): they cancel the calls
still running in that session first, then stop what this server holds of it (the list in
`tools.session_end`: grants, run tokens, containers). For
`approval_decided` it is a request waiting on that approval (`wait_for_decision`), which
reads it again at once.

A missed notice is a delay, never a lost effect: when the listener (re)connects, `resync`
re-reads from the records every grant still live here; and a run never starts with a grant
the records say is revoked (`refuse_revoked`), whether or not its notice came. The server
that published a notice took the effect itself before it did, so skips its own copy.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio

from airlock.broker import Grant
from airlock.errors import NotFound
from airlock.store import (
    AnyNotice,
    ApprovalDecided,
    ApprovalRecord,
    GrantRevoked,
    Notices,
    Sampled,
)

from .context import Services

log = logging.getLogger(__name__)

REREAD_S = 1.0
"""How often a request waiting on an approval re-reads it without a notice: `airlock
approvals` on one server's SQLite is another process, with no channel to announce on."""


def subscribe(services: Services) -> None:
    """Take the local effect of every revocation the fleet announces, and re-read the
    grants live here whenever notices may have been missed."""

    forged = Sampled("ignored grant ids in a grant_revoked notice: their records are not revoked")

    async def revoked(notice: AnyNotice) -> None:
        # This server's own notices are skipped: it revoked before publishing.
        if isinstance(notice, GrantRevoked) and notice.origin != services.notices.origin:
            await take_revocation(services, notice, forged)

    async def reread() -> None:
        await resync(services)

    services.notices.subscribe(revoked, "grant_revoked")
    services.notices.on_resync(reread)


async def take_revocation(services: Services, notice: GrantRevoked, forged: Sampled) -> int:
    """Revoke here those of the notice's grants that are live here, are its tenant's, and
    whose records say they are revoked; how many. A notice is a hint that anyone who may
    connect can forge (another tenant's ids, a revocation never made): the records are the
    truth. Ids not live here cost no query."""
    now = services.clock()
    named = services.grants.live_of(notice.tenant, notice.grant_ids, now)
    if not named:
        return 0
    revoked = await services.db.revoked_grants(named)
    if len(revoked) < len(named):
        forged.warn()
    return len(services.grants.revoke_ids(sorted(revoked), now=services.clock()))


async def resync(services: Services) -> int:
    """Revoke here every grant still live here that the records say is revoked (notices may
    have been missed); how many."""
    now = services.clock()
    live = [g.id for g in services.grants.all() if g.live(now)]
    if not live:
        return 0
    revoked = services.grants.revoke_ids(sorted(await services.db.revoked_grants(live)), now=now)
    if revoked:
        log.warning("revoked %d grant(s) whose revocation notice was missed", len(revoked))
    return len(revoked)


async def refuse_revoked(services: Services, grants: list[Grant]) -> None:
    """Refuse a run whose grants the records say are revoked, as an unknown grant is
    refused, and take that revocation here: its notice may still be on its way."""
    if not grants:
        return
    revoked = await services.db.revoked_grants([g.id for g in grants])
    if not revoked:
        return
    services.grants.revoke_ids(sorted(revoked), now=services.clock())
    first = min(revoked)
    raise NotFound(
        f"capability {first!r} is unknown, expired or revoked in this session; "
        "request it again with request_capability"
    )


async def wait_for_decision(
    notices: Notices,
    read: Callable[[], Awaitable[ApprovalRecord | None]],
    approval_id: str,
    *,
    wait_s: float,
    reread_s: float = REREAD_S,
) -> ApprovalRecord | None:
    """The approval as `read` finds it once it left `pending`, or after `wait_s` seconds:
    read again as soon as its `approval_decided` notice arrives (from any server of the
    fleet), and every `reread_s` seconds meanwhile."""
    heard = anyio.Event()

    async def listen(notice: AnyNotice) -> None:
        if isinstance(notice, ApprovalDecided) and notice.approval_id == approval_id:
            heard.set()

    stop = notices.subscribe(listen, "approval_decided")
    try:
        end = anyio.current_time() + max(0.0, wait_s)
        while True:
            record = await read()
            left = end - anyio.current_time()
            if record is None or record.status != "pending" or left <= 0:
                return record
            with anyio.move_on_after(min(reread_s, left)):
                await heard.wait()
            heard = anyio.Event() if heard.is_set() else heard
    finally:
        stop()
