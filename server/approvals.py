"""The operator's side of pending approvals: `airlock approvals list|approve|deny` and the
HTTP routes under /approvals (the operator token, or admin keys for their own tenant).

Both read and write the database the server uses (the CLI is another process), so a
decision is one conditional UPDATE: only a pending, unexpired approval of a live session
changes, and a second decision finds nothing to change. The agent's reason is untrusted
text and is shown sanitized. Granting happens in the server, when the session that asked
collects it (`tools.approvals`).
"""

from __future__ import annotations

import getpass
import logging
import sys
import time
from argparse import Namespace
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from airlock.errors import InvalidRequest, NotFound
from airlock.store import ApprovalDecided, ApprovalRecord, Database, Notices
from airlock.tools import Services
from airlock.tools.context import iso_time
from airlock.tools.envelope import sanitize

from .auth import ADMIN_SCOPE
from .bearer import RouteAuth, RouteCaller, unauthorized
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

    The decision is announced on `notices` (the serving server's: every server of its fleet
    hears it), releasing the request that waits on it wherever it waits. None for the CLI
    on one server's SQLite: another process, with no channel; the waiting request re-reads
    the record (`tools.fleet.REREAD_S`)."""
    record = await db.get_approval(approval_id)
    if record is None or (tenant is not None and record.tenant != tenant):
        raise NotFound(f"no approval {approval_id!r}; `airlock approvals list` shows pending ones")
    if record.status != "pending":
        raise InvalidRequest(f"approval {approval_id} is {record.status}, not pending")
    if record.expires_at <= now:
        await db.expire_approvals(now=now)
        raise InvalidRequest(f"approval {approval_id} expired at {iso_time(record.expires_at)}")
    session = await db.get_session(record.session_id)
    if session is None or session.ended_at is not None:
        await db.expire_approvals(now=now, session_id=record.session_id)
        raise InvalidRequest(
            f"the session that asked for approval {approval_id} has ended; nothing to decide"
        )
    status: Literal["approved", "denied"] = "approved" if approve else "denied"
    moved = await db.move_approval(
        approval_id, from_status="pending", to_status=status, at=now, by=by, live_at=now
    )
    if not moved:
        raise InvalidRequest(f"approval {approval_id} was decided or expired meanwhile")
    log.info(
        "approval decided",
        extra={
            "fields": {
                "approval": approval_id,
                "tenant": record.tenant,
                "session": record.session_id,
                "capability": record.capability,
                "outcome": status,
                "by": by,
            }
        },
    )
    decided = await db.get_approval(approval_id)
    assert decided is not None
    if notices is not None:
        await notices.publish(
            ApprovalDecided(
                approval_id=approval_id,
                tenant=record.tenant,
                session_id=record.session_id,
                status=status,
            )
        )
    return decided


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
    await db.expire_approvals(now=now)
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


def add_routes(
    mcp: MCPServer,
    services: Callable[[], Services | None],
    auth: RouteAuth,
    clock: Callable[[], float],
) -> None:
    """GET /approvals (pending ones), POST /approvals/{id}/approve and /deny. The caller
    is the operator (every tenant's) or a key or JWT with the `airlock:admin` scope (its
    own tenant's); a foreign or unknown id is 404 either way."""

    Handler = Callable[[Request, Services, RouteCaller], Awaitable[Response]]

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            who = await auth.caller(request)
            if who is None:
                return unauthorized()
            if not who.admin:
                return JSONResponse(
                    {"error": "insufficient_scope", "error_description": f"needs {ADMIN_SCOPE}"},
                    status_code=403,
                )
            serving = services()
            if serving is None:
                return JSONResponse({"error": "starting"}, status_code=503)
            return await handler(request, serving, who)

        return route

    async def listing(_: Request, serving: Services, who: RouteCaller) -> Response:
        await serving.db.expire_approvals(now=clock())
        records = await serving.db.list_approvals(tenant=who.tenant, status="pending", limit=1000)
        return JSONResponse({"approvals": [describe(r) for r in records]})

    def deciding(approve: bool) -> Handler:
        async def handler(request: Request, serving: Services, who: RouteCaller) -> Response:
            approval_id = str(request.path_params["approval_id"])
            try:
                record = await decide(
                    serving.db,
                    approval_id,
                    approve=approve,
                    by=who.by,
                    now=clock(),
                    notices=serving.notices,
                    tenant=who.tenant,
                )
            except NotFound as exc:
                return JSONResponse({"error": "not_found", "detail": str(exc)}, status_code=404)
            except InvalidRequest as exc:
                return JSONResponse({"error": "conflict", "detail": str(exc)}, status_code=409)
            return JSONResponse(describe(record))

        return handler

    mcp.custom_route("/approvals", methods=["GET"])(guarded(listing))
    mcp.custom_route("/approvals/{approval_id}/approve", methods=["POST"])(guarded(deciding(True)))
    mcp.custom_route("/approvals/{approval_id}/deny", methods=["POST"])(guarded(deciding(False)))


async def approvals_command(config: Config, action: str, args: Namespace) -> int:
    """`airlock approvals list|approve|deny`, against the server's database."""
    db = await open_records(config)
    try:
        now = time.time()
        if action == "list":
            sys.stdout.write(await approvals_text(db, every=args.all, now=now) + "\n")
            return 0
        record = await decide(
            db,
            args.approval_id,
            approve=action == "approve",
            by=f"cli:{getpass.getuser()}",
            now=now,
            # Another process than the server's, on its SQLite: the waiting request re-reads.
            notices=None,
        )
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
