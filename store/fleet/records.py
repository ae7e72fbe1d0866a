"""The fleet's sweeps over the records: ending the runs of instances found dead (by their
flock, `claims.py`, or their advisory lock, `pg_claims.py`), ending the runs no live claim
holds (every replica's housekeeping), and the replicas as PostgreSQL lists them. One
family of `Database` (`store/database/`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..records import ReplicaRecord, RunStatus
from ..transactions import Transactions
from .fencing import end_orphaned_runs, mark_unfinished_runs
from .replicas import list_replicas


class FleetRecords(Transactions):
    """What the fleet's coordination reads and writes in the records."""

    async def end_orphaned_runs(self, *, error: str, finished_at: float) -> int:
        """End `killed` every run left `running` whose owner holds no current claim on it
        (`fencing.end_orphaned_runs`); how many. A fleet's sweep: on SQLite, where no
        claim is listed, it ends nothing (the flocks of `claims.py` find the dead)."""
        if self._place.is_sqlite:
            return 0
        return await self._write(
            lambda conn: end_orphaned_runs(conn, error=error, finished_at=finished_at)
        )

    async def mark_unfinished_runs(
        self, *, instance_ids: Sequence[str], status: RunStatus, error: str, finished_at: float
    ) -> int:
        """End every run still `running` that one of `instance_ids` owns (servers that
        died: see `claims.py`), and close their kept browsers; return how many runs."""
        return await self._write(
            lambda conn: mark_unfinished_runs(
                conn, instance_ids=instance_ids, status=status, error=error, finished_at=finished_at
            )
        )

    async def list_replicas(self) -> list[ReplicaRecord]:
        """The replicas a fleet's PostgreSQL lists, oldest claim first, each with whether its
        lock is held and its last heartbeat; empty on SQLite, which has no fleet."""
        if self._place.is_sqlite:
            return []
        return await self._read(list_replicas)
