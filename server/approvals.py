"""The operator's side of pending approvals: `airlock approvals list|approve|deny`, and the
decisions and listings the HTTP routes under /approvals serve (`registration/routes.py`;
the operator token, or admin keys for their own tenant). Imports neither the MCP SDK nor
an HTTP server, so the CLI starts without them.

Both read and write the database the server uses (the CLI is another process); which
moves an approval may make is `broker.approvals`' (only a pending, unexpired approval of
a live session is decided, once), and this module says its refusals to the operator.
The agent's reason is untrusted text and is shown sanitized. Granting happens in the
server, when the session that asked collects it (`tools.approvals`).
"""

from __future__ import annotations

import getpass
import logging
import sys
import time
from argparse import Namespace
from typing import TYPE_CHECKING, Any

from airlock.broker import approvals
from airlock.errors import InvalidRequest, NotFound
from airlock.store import ApprovalDecided, ApprovalRecord, Database, Notices

if TYPE_CHECKING:
    from airlock.store.fleet.pg_notices import PostgresNotices
from airlock.tools.context import iso_time
from airlock.tools.envelope import sanitize

from .config import Config, open_records
from .terminal import safe_line

log = logging.getLogger("airlock.approvals")


async def decide(
    db: Database,
    approval_id: str,
    *,
    approve: bool,
    by: str,
    now: float,
    notices: Notices | None,
    tenant: str | None = None,
) -> ApprovalRecord:
    """Approve or deny a pending approval (of `tenant`, when given); the record after.
    Whether it may move is `broker.approvals`'; this says why not to the operator.

    The decision is announced on `notices` (the serving server's, or the CLI's fleet
    channel: every server of the fleet hears it), releasing the request that waits on it
    wherever it waits. None for the CLI on one server's SQLite: the waiting request
    re-reads the record (`tools.fleet.REREAD_S`)."""
    record = await db.get_approval(approval_id)
    if record is None or (tenant is not None and record.tenant != tenant):
        raise NotFound(f"no approval {approval_id!r}; `airlock approvals list` shows pending ones")
    decided = await approvals.decide(db, record, approve=approve, by=by, now=now)
    if isinstance(decided, approvals.Refused):
        raise InvalidRequest(_refusal(decided))
    if notices is not None and decided.status in ("approved", "denied"):
        await notices.publish(
            ApprovalDecided(
                approval_id=approval_id,
                tenant=record.tenant,
                session_id=record.session_id,
                status=decided.status,
            )
        )
    log.info(
        "approval decided",
        extra={
            "fields": {
                "approval": approval_id,
                "tenant": record.tenant,
                "session": record.session_id,
                "capability": record.capability,
                "outcome": decided.status,
                "by": by,
            }
        },
    )
    return decided


def _refusal(refused: approvals.Refused) -> str:
    record = refused.record
    match refused.why:
        case "not_pending":
            return f"approval {record.id} is {record.status}, not pending"
        case "expired":
            return f"approval {record.id} expired at {iso_time(record.expires_at)}"
        case "session_ended":
            return f"the session that asked for approval {record.id} has ended; nothing to decide"
        case "lost":
            return f"approval {record.id} was decided or expired meanwhile"


def describe(record: ApprovalRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "tenant": record.tenant,
        "session_id": record.session_id,
        "capability": record.capability,
        "params": {sanitize(k): sanitize(v) for k, v in record.params.items()},
        "ttl_s": record.ttl_s,
        "reason": sanitize(record.reason),
        "status": record.status,
        "requested_at": iso_time(record.created_at),
        "waits_until": iso_time(record.expires_at),
        "decided_by": record.decided_by,
        "grant_id": record.grant_id,
    }


async def approvals_text(db: Database, *, every: bool, now: float) -> str:
    await approvals.expire(db, now=now)
    records = await db.list_approvals(status=None if every else "pending", limit=1000)
    if not records:
        return "no pending approvals" if not every else "no approvals recorded"
    lines = []
    for r in records:
        params = ",".join(f"{k}={v}" for k, v in sorted(r.params.items())) or "-"
        lines += [
            safe_line(f"{r.id}  {r.status}  tenant {r.tenant}  session {r.session_id}"),
            "    "
            + safe_line(
                f"{r.capability} ({params}) for {r.ttl_s} s; waits until {iso_time(r.expires_at)}"
                + (f"; decided by {r.decided_by}" if r.decided_by else "")
            ),
            "    reason (the agent's words): " + safe_line(repr(r.reason)),
        ]
    return "\n".join(lines)


def _fleet_channel(config: Config) -> PostgresNotices | None:
    """A fleet's channel to announce the decision on, releasing the waiting request at once
    wherever it waits; None on one server's SQLite (another process than the server's, with
    no channel: the waiting request re-reads the record, `tools.fleet.REREAD_S`)."""
    if config.fleet_url is None:
        return None
    from airlock.store.fleet.pg_notices import PostgresNotices  # psycopg: for a fleet only

    return PostgresNotices(config.fleet_url, f"cli-{getpass.getuser()}")


async def approvals_command(config: Config, action: str, args: Namespace) -> int:
    """`airlock approvals list|approve|deny`, against the server's database."""
    db = await open_records(config)
    try:
        now = time.time()
        if action == "list":
            sys.stdout.write(await approvals_text(db, every=args.all, now=now) + "\n")
            return 0
        notices = _fleet_channel(config)
        try:
            record = await decide(
                db,
                args.approval_id,
                approve=action == "approve",
                by=f"cli:{getpass.getuser()}",
                now=now,
                notices=notices,
            )
        finally:
            if notices is not None:
                await notices.aclose()
    finally:
        await db.close()
    sys.stdout.write(
        safe_line(
            f"{record.id} {record.status}: {record.capability} for session "
            f"{record.session_id} of tenant {record.tenant}"
        )
        + (
            "; the agent collects it by calling request_capability with this approval_id\n"
            if record.status == "approved"
            else "\n"
        )
    )
    return 0
