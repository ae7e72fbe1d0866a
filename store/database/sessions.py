"""The sessions' records: a lease's row, its uses and its end (`server/sessions.py` owns
the leases; this only reads and writes their rows). A session's workspace is
`workspaces.py`'s."""

from __future__ import annotations

from ..queries import runs
from ..records import SessionRecord
from ..transactions import Transactions, checked_limit


class Sessions(Transactions):
    """Sessions: created, used, ended, listed."""

    async def create_session(self, rec: SessionRecord) -> None:
        """Insert a new session; an existing id is a `StoreError`."""
        await self._write(lambda conn: runs.create_session(conn, rec))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self._read(lambda conn: runs.get_session(conn, session_id))

    async def list_sessions(
        self, *, live_at: float | None = None, tenant: str | None = None, limit: int = 100
    ) -> list[SessionRecord]:
        """Sessions, newest first: with `live_at`, only those neither ended nor expired then."""
        limit = checked_limit(limit)
        return await self._read(
            lambda conn: runs.list_sessions(conn, live_at=live_at, tenant=tenant, limit=limit)
        )

    async def touch_session(
        self, session_id: str, *, last_used_at: float, expires_at: float
    ) -> bool:
        """Record a use of a live session and its new expiry; an ended session stays as it
        was. Whether the session was live (False: it ended, maybe on another server)."""
        return await self._write(
            lambda conn: runs.touch_session(
                conn, session_id, last_used_at=last_used_at, expires_at=expires_at
            )
        )

    async def end_session(
        self, session_id: str, *, ended_at: float, reason: str, containers_removed: int
    ) -> None:
        """Record the end of a session; the first end wins, later ones change nothing."""
        await self._write(
            lambda conn: runs.end_session(
                conn,
                session_id,
                ended_at=ended_at,
                reason=reason,
                containers_removed=containers_removed,
            )
        )
