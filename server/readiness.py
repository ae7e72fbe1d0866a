"""Whether this server should be sent calls (`/readyz`), as against whether it lives
(`/livez`, and `/healthz` as before).

A replica that lost its claim on the fleet's database, or whose store does not answer,
refuses every call it is sent (`StoreUnavailable`, "could not read or write its records"),
yet its process is fine and reconnects by itself: a load balancer should stop sending it
calls (readiness fails), and an orchestrator must not restart it (liveness holds). Ready
means serving (not starting or stopping), the claim held, and the store answering one
trivial query within `PING_TIMEOUT_S` (`Database.ping`, which keeps at most one query out
however often probes come).
"""

from __future__ import annotations

from airlock.errors import StoreError, StoreUnavailable
from airlock.store import Database, InstanceClaim

PING_TIMEOUT_S = 2.0


async def not_ready(
    db: Database, claim: InstanceClaim, *, within_s: float = PING_TIMEOUT_S
) -> str | None:
    """Why this serving server should not be sent calls, or None when it should."""
    try:
        claim.check()
    except StoreUnavailable as exc:
        return str(exc)
    try:
        if await db.ping(within_s):
            return None
    except StoreError as exc:
        return str(exc)
    return (
        f"the store {db.shown} did not answer within {within_s:g} s; this server takes no "
        "calls it could not record until it does"
    )
