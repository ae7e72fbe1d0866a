"""end_session: the one teardown of a session, whatever ended it.

Kills and removes every container of the session and records the end. Artifacts
and run records stay: they outlive the box.
"""

from __future__ import annotations

from .context import Services
from .models import EndSessionResult


async def teardown_session(services: Services, session_id: str, *, reason: str) -> EndSessionResult:
    backend = services.sandbox.connected()
    removed = await backend.remove_session(session_id) if backend is not None else 0
    record = await services.db.get_session(session_id)
    already_ended = record is not None and record.ended_at is not None
    await services.db.end_session(
        session_id, ended_at=services.clock(), reason=reason, containers_removed=removed
    )
    return EndSessionResult(
        session_id=session_id, containers_removed=removed, ended=not already_ended
    )
