"""A replica's advisory lock as PostgreSQL names it: the key derived from its instance id,
and the condition that finds the lock in `pg_locks`, which the claim (`pg_claims`), the
fencing of runs (`fencing`) and the list of replicas (`replicas`) all read. No I/O here.
"""

from __future__ import annotations

import hashlib


def lock_key(instance_id: str) -> int:
    """The advisory lock key of an instance: 64 bits of a hash, in PostgreSQL's signed range."""
    digest = hashlib.sha256(b"airlock-instance:" + instance_id.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def held_lock(key: str, locks: str = "l") -> str:
    """The SQL condition that row `locks` of `pg_locks` is the granted advisory lock on the
    bigint `key` (an SQL expression) in this database. One bigint key shows there as classid
    (its high 32 bits) and objid (its low 32 bits), with objsubid 1."""
    return f"""{locks}.locktype = 'advisory' AND {locks}.granted AND {locks}.objsubid = 1
     AND {locks}.database = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND {locks}.classid = (({key} >> 32) & 4294967295)::oid
     AND {locks}.objid = ({key} & 4294967295)::oid"""
