"""The capability grants' records: a grant counted against its session's and tenant's
quotas as it is inserted, its revocation, and the check that refuses a revoked grant before
its notice arrives. The grants themselves (and run tokens, which are never stored) are the
broker's."""

from __future__ import annotations

from collections.abc import Sequence

from ..queries import audit
from ..records import GrantRecord
from ..transactions import Transactions, checked_limit


class Grants(Transactions):
    """Capability grants."""

    async def record_grant(
        self,
        rec: GrantRecord,
        *,
        max_per_session: int | None = None,
        max_live_per_tenant: int | None = None,
    ) -> str | None:
        """Insert `rec`, unless its session already holds `max_per_session` grants live at
        `rec.created_at` (unrevoked, unexpired) or its tenant `max_live_per_tenant`, of every
        server on these records: counted and inserted under the tenant's quota lock. The
        quota that refused it ("max_per_session" or "max_live_per_tenant"), or None."""
        return await self._write(
            lambda conn: audit.record_grant(
                conn, rec, max_per_session=max_per_session, max_live_per_tenant=max_live_per_tenant
            ),
        )

    async def mark_grants_revoked(self, grant_ids: Sequence[str], *, at: float) -> None:
        if grant_ids:
            await self._write(lambda conn: audit.mark_grants_revoked(conn, grant_ids, at=at))

    async def revoked_grants(self, grant_ids: Sequence[str]) -> set[str]:
        """Which of `grant_ids` the records say are revoked (by any server of a fleet): the
        check that refuses a revoked grant even before its notice arrives. One lookup by
        primary key per id."""
        ids = list(dict.fromkeys(grant_ids))
        return await self._read(lambda conn: audit.revoked_grants(conn, ids)) if ids else set()

    async def get_grant(self, grant_id: str) -> GrantRecord | None:
        return await self._read(lambda conn: audit.get_grant(conn, grant_id))

    async def list_grants(
        self, *, tenant: str | None = None, session_id: str | None = None, limit: int = 100
    ) -> list[GrantRecord]:
        """Grants, newest first."""
        filters = {"tenant": tenant, "session_id": session_id}
        limit = checked_limit(limit)
        return await self._read(lambda conn: audit.list_grants(conn, filters, limit))
