"""What a session's end stops on this server: one list, one entry per kind of thing.

`STOPS` is the list. Each entry names what it stops and a coroutine that stops the
session's share of it in this process and on this server's engine, returning how many it
stopped. `stop_session` runs every entry in order (each even when an earlier one failed;
the first failure is raised after all ran) and, when the session ends here rather than
only being let go, records the end and announces it to the fleet.

The one caller is the owner of a session's end, `server/sessions.py` (`Leases._end`),
whatever ended it: `end_session`, a connection closing, idle or maximum lifetime (the
sweep), another server's announced end or its record found on re-reading, a touch that
finds it ended, this server's shutdown, or a fleet replica leaving. The owner cancels the
session's calls first (it holds their cancel scopes), then calls `stop_session`.

To make a session's end stop something new (kept browsers, tasks): write its module with
one `async def stop(services, tenant, session_id) -> int` and add one `Stop` entry to
`STOPS`. Order matters: grants and run tokens go first, so the session's proxies refuse
the very next request while its containers are being removed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from airlock.broker import grant_prefix
from airlock.store import SessionEnded

from .approvals import expire_pending
from .context import Services
from .models import EndSessionResult

log = logging.getLogger(__name__)

SessionStop = Callable[[Services, str, str], Awaitable[int]]
"""(services, tenant, session_id) -> how many things of the session it stopped here."""


@dataclass(frozen=True)
class Stop:
    """One kind of thing a session's end stops: its name (in logs) and how."""

    what: str
    stop: SessionStop


async def _revoke_grants(services: Services, tenant: str, session_id: str) -> int:
    return services.grants.revoke_prefix(grant_prefix(tenant, session_id), now=services.clock())


async def _revoke_tokens(services: Services, tenant: str, session_id: str) -> int:
    return services.tokens.revoke_session(tenant, session_id)


async def _close_browsers(services: Services, tenant: str, session_id: str) -> int:
    return await services.browsers.close_session(tenant, session_id)


async def _remove_containers(services: Services, tenant: str, session_id: str) -> int:
    backend = services.engine.connected()
    return await backend.remove_session(session_id) if backend is not None else 0


CONTAINERS = "containers"

STOPS: tuple[Stop, ...] = (
    Stop("grants", _revoke_grants),
    Stop("run tokens", _revoke_tokens),
    # Before the containers: a kept browser's box is one of them, and its CA goes with it.
    Stop("kept browsers", _close_browsers),
    Stop(CONTAINERS, _remove_containers),
)


async def stop_session(
    services: Services, tenant: str, session_id: str, *, ended_because: str | None
) -> EndSessionResult:
    """Stop what this server holds of the session (every entry of `STOPS`); with
    `ended_because` (the session ends here, for that reason), then expire its pending
    approvals, record its end and its grants' revocation, and tell the fleet, whose other
    servers let go of what they hold of it. Artifacts and run records stay."""
    now = services.clock()
    # Read before the grants stop: these are the grants whose revocation is recorded.
    revoked = [g.id for g in services.grants.live_for_session(tenant, session_id, now)]
    stopped = await _stop_all(services, tenant, session_id)
    removed = stopped.get(CONTAINERS, 0)
    if ended_because is None:
        return EndSessionResult(session_id=session_id, containers_removed=removed, ended=False)
    await services.db.mark_grants_revoked(revoked, at=now)
    await expire_pending(services, session_id=session_id)
    record = await services.db.get_session(session_id)
    already_ended = record is not None and record.ended_at is not None
    await services.db.end_session(
        session_id, ended_at=services.clock(), reason=ended_because, containers_removed=removed
    )
    # Recorded first: a server that hears it may re-read the records at once.
    await services.notices.publish(SessionEnded(tenant=tenant, session_id=session_id))
    return EndSessionResult(
        session_id=session_id, containers_removed=removed, ended=not already_ended
    )


async def _stop_all(services: Services, tenant: str, session_id: str) -> dict[str, int]:
    stopped: dict[str, int] = {}
    failure: Exception | None = None
    for entry in STOPS:
        try:
            stopped[entry.what] = await entry.stop(services, tenant, session_id)
        except Exception as exc:
            # The rest still stop; the first failure is the caller's to report.
            log.error("session %s: stopping its %s failed", session_id, entry.what, exc_info=exc)
            failure = failure or exc
    if failure is not None:
        raise failure
    return stopped
