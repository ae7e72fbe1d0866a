"""The audit's records: every egress decision (and their sums by rule), and the drills."""

from __future__ import annotations

from collections.abc import Sequence

from ..queries import audit
from ..records import DrillRecord, EgressCount, EgressRecord
from ..transactions import Transactions, checked_limit


class Audit(Transactions):
    """Egress decisions and drills."""

    async def add_egress(self, records: Sequence[EgressRecord]) -> None:
        if records:
            await self._write(lambda conn: audit.add_egress(conn, records))

    async def list_egress(
        self,
        *,
        tenant: str | None = None,
        session_id: str | None = None,
        run_id: str | None = None,
        limit: int = 200,
    ) -> list[EgressRecord]:
        """Egress decisions, oldest first, of one run, session or tenant (or all)."""
        filters = {"tenant": tenant, "session_id": session_id, "run_id": run_id}
        limit = checked_limit(limit)
        return await self._read(lambda conn: audit.list_egress(conn, filters, limit))

    async def egress_counts(
        self, *, since: float, tenant: str | None = None, except_tenant: str | None = None
    ) -> list[EgressCount]:
        """Egress decisions from `since` on, summed by rule, verdict and destination, each
        with its latest reason; of one tenant, or of all but `except_tenant`."""
        return await self._read(
            lambda conn: audit.egress_counts(
                conn, since=since, tenant=tenant, except_tenant=except_tenant
            )
        )

    async def last_egress_use(
        self, *, tenant: str | None = None, except_tenant: str | None = None
    ) -> dict[str, float]:
        """The last time each rule let a request out, over all time."""
        return await self._read(
            lambda conn: audit.last_egress_use(conn, tenant=tenant, except_tenant=except_tenant)
        )

    async def record_drill(self, rec: DrillRecord) -> None:
        await self._write(lambda conn: audit.record_drill(conn, rec))

    async def list_drills(self, *, limit: int = 20) -> list[DrillRecord]:
        """Drills, newest first."""
        limit = checked_limit(limit)
        return await self._read(lambda conn: audit.list_drills(conn, limit))
