"""end_session: the one teardown of a session, whatever ended it.

In one step: revokes every capability and run token of the session (so its
proxies refuse the very next request), expires its pending approvals, kills and
removes every container of the session, records the end, and tells the fleet, whose
other servers do the same with what they hold of it (`tools.fleet`). Artifacts and run
records stay: they outlive the box.
"""

from __future__ import annotations

from airlock.store import SessionEnded

from .approvals import expire_pending
from .context import Services
from .fleet import end_here
from .models import EndSessionResult


async def teardown_session(
    services: Services, session_id: str, tenant: str, *, reason: str
) -> EndSessionResult:
    now = services.clock()
    revoked = [g.id for g in services.grants.live_for_session(tenant, session_id, now)]
    removed = await end_here(services, tenant, session_id)
    await services.db.mark_grants_revoked(revoked, at=now)
    await expire_pending(services, session_id=session_id)
    record = await services.db.get_session(session_id)
    already_ended = record is not None and record.ended_at is not None
    await services.db.end_session(
        session_id, ended_at=services.clock(), reason=reason, containers_removed=removed
    )
    # Recorded first: a server that hears it may re-read the records at once.
    await services.notices.publish(SessionEnded(tenant=tenant, session_id=session_id))
    return EndSessionResult(
        session_id=session_id, containers_removed=removed, ended=not already_ended
    )
