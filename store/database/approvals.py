"""The approvals' records: a capability request waiting on a human, its caps counted in a
serializable transaction, and its one move from `pending` to a decision or expiry."""

from __future__ import annotations

from ..queries import audit
from ..records import ApprovalRecord
from ..transactions import Transactions, checked_limit


class Approvals(Transactions):
    """Approvals of capability requests."""

    async def create_approval(
        self,
        rec: ApprovalRecord,
        *,
        max_pending: int | None = None,
        max_pending_tenant: int | None = None,
    ) -> str | None:
        """Insert `rec`, unless its session already has `max_pending` approvals still
        pending (unexpired at `rec.created_at`) or its tenant `max_pending_tenant`: counted
        and inserted in one serializable transaction so concurrent requests (of any
        server) cannot overshoot. The cap that refused it ("session" or "tenant"), or None
        when inserted."""
        return await self._write(
            lambda conn: audit.create_approval(conn, rec, max_pending, max_pending_tenant),
            serializable=True,
        )

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return await self._read(lambda conn: audit.get_approval(conn, approval_id))

    async def list_approvals(
        self,
        *,
        tenant: str | None = None,
        status: str | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[ApprovalRecord]:
        """Approvals, oldest first (or, with `newest_first`, the latest `limit` of them)."""
        filters = {"tenant": tenant, "status": status}
        limit = checked_limit(limit)
        return await self._read(
            lambda conn: audit.list_approvals(conn, filters, limit, newest_first=newest_first)
        )

    async def move_approval(
        self,
        approval_id: str,
        *,
        from_status: str,
        to_status: str,
        at: float,
        by: str | None = None,
        grant_id: str | None = None,
        live_at: float | None = None,
    ) -> bool:
        """Move one approval from `from_status` to `to_status`, atomically; False when it
        is not in `from_status` (or, with `live_at`, expired by then): someone else won."""
        return await self._write(
            lambda conn: audit.move_approval(
                conn,
                approval_id,
                from_status=from_status,
                to_status=to_status,
                at=at,
                by=by,
                grant_id=grant_id,
                live_at=live_at,
            )
        )

    async def expire_approvals(
        self, *, now: float, session_id: str | None = None
    ) -> list[ApprovalRecord]:
        """Mark pending approvals past their wait (or every pending one of `session_id`,
        which ended) expired; return them as they were."""
        return await self._write(
            lambda conn: audit.expire_approvals(conn, now=now, session_id=session_id)
        )
