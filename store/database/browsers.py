"""The kept browsers' records: one row per kept browser (who keeps it, on which server, when
it opened and closed and why) and one per call on it, for `airlock audit browsers` and the
tenant's cap counted over every server of these records."""

from __future__ import annotations

from ..queries import browsers
from ..records import KeptBrowserRecord
from ..transactions import Transactions, checked_limit


class Browsers(Transactions):
    """Kept browsers and their calls."""

    async def open_kept_browser(self, rec: KeptBrowserRecord) -> None:
        await self._write(lambda conn: browsers.open_browser(conn, rec))

    async def add_kept_browser_step(self, browser_id: str, step: int, run_id: str) -> None:
        await self._write(lambda conn: browsers.add_step(conn, browser_id, step, run_id))

    async def close_kept_browser(self, browser_id: str, *, at: float, why: str) -> None:
        await self._write(lambda conn: browsers.close_browser(conn, browser_id, at=at, why=why))

    async def count_open_kept_browsers(self, tenant: str, *, except_instance: str) -> int:
        """The tenant's open kept browsers on every other server of these records."""
        return await self._read(
            lambda conn: browsers.count_open(conn, tenant, except_instance=except_instance)
        )

    async def kept_browser_step_of(self, run_id: str) -> tuple[str, int] | None:
        """(browser id, call number) when run `run_id` was a call on a kept browser."""
        return await self._read(lambda conn: browsers.step_of_run(conn, run_id))

    async def list_kept_browsers(
        self, *, tenant: str | None = None, session_id: str | None = None, limit: int = 50
    ) -> list[KeptBrowserRecord]:
        limit = checked_limit(limit)
        return await self._read(
            lambda conn: browsers.list_browsers(
                conn, tenant=tenant, session_id=session_id, limit=limit
            )
        )
