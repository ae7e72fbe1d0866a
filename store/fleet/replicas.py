"""A fleet's replicas as PostgreSQL sees them: each row of `airlock_instances` (written by
`pg_claims`, which owns the claims) with whether its advisory lock is held and when the
connection holding it last ran a query, which is the claim's heartbeat (`pg_claims.HEARTBEAT_S`).

Read from PostgreSQL's own views (`pg_locks`, `pg_stat_activity`), so nothing is written
for it and nothing can be stale: a lock is held exactly while its replica's connection lives.
PostgreSQL only: SQLite's claims are flocks of one machine's servers (`claims.py`).
"""

from __future__ import annotations

from sqlalchemy import Connection, text

from ..records import ReplicaRecord
from .locks import held_lock

_REPLICAS = text(
    f"""
    SELECT i.id, i.claimed_at, l.pid AS holder_pid,
           EXTRACT(EPOCH FROM a.query_start) AS last_heartbeat
    FROM airlock_instances i
    LEFT JOIN pg_locks l ON {held_lock("i.lock_key")}
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    ORDER BY i.claimed_at, i.id
    """
)


def list_replicas(conn: Connection) -> list[ReplicaRecord]:
    return [
        ReplicaRecord(
            id=row["id"],
            claimed_at=row["claimed_at"],
            live=row["holder_pid"] is not None,
            holder_pid=row["holder_pid"],
            last_heartbeat=float(row["last_heartbeat"]) if row["last_heartbeat"] else None,
        )
        for row in conn.execute(_REPLICAS).mappings()
    ]
