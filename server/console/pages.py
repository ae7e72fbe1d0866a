"""The console's pages: what each reads from the records, through the store's own
queries and the CLI's own reports (`policy_usage.usage_report`, the drills the CLI
records), and which template shows it. Every page is reachable by links from /console.

The operator sees every tenant. What a page shows of a run (its code, output, file names,
egress hosts and reasons) came from the sandbox: the views keep it as plain strings and
the templates print it as inert text (`app.py`).
"""

from __future__ import annotations

from collections import defaultdict

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from airlock.broker import approvals
from airlock.store import ArtifactRecord, RunRecord
from airlock.tools.browse_result import PAGE_FILE, SCREENSHOT_FILE, screenshot_png
from airlock.tools.context import iso_time
from airlock.tools.models import STREAM_PATHS

from ..policy_usage import parse_since, usage_report
from .app import Console, Visit, get
from .views import (
    ApprovalRow,
    Block,
    SessionRow,
    approval_row,
    artifact_row,
    egress_row,
    grant_row,
    replica_row,
    run_row,
    session_row,
)

MAX_SHOWN_BYTES = 64 * 1024
"""What a run page shows of its code and each stream; the rest is a download away."""
MAX_LISTED = 500
HISTORY = 50
SINCE_CHOICES = ("7d", "30d", "90d")


def routes(console: Console) -> list[BaseRoute]:
    return [
        get("/", console.page(home)),
        get("/approvals", console.page(approvals_page)),
        get("/approvals/pending", console.page(pending_fragment)),
        get("/sessions", console.page(sessions_page)),
        get("/sessions/{session_id}", console.page(session_page)),
        get("/runs/{run_id}", console.page(run_page)),
        get("/review", console.page(review_page)),
        get("/fleet", console.page(fleet_page)),
    ]


def _policy_source(visit: Visit, tenant: str) -> str:
    if tenant in visit.services.tenant_policies:
        return f"tenant {tenant}'s own policy"
    return "the server's policy"


async def home(console: Console, request: Request, visit: Visit) -> Response:
    db = visit.services.db
    live = await db.list_sessions(live_at=console.clock(), limit=MAX_LISTED)
    drills = await db.list_drills(limit=1)
    replicas = await db.list_replicas()
    return console.render(
        request,
        "home.html",
        visit=visit,
        title="Console",
        live_sessions=len(live),
        tenants=len({s.tenant for s in live}),
        drill=drills[0] if drills else None,
        drill_time=iso_time(drills[0].started_at) if drills else "",
        fleet=db.is_fleet,
        replicas=sum(r.live for r in replicas),
    )


async def _pending_rows(console: Console, visit: Visit) -> list[ApprovalRow]:
    services, now = visit.services, console.clock()
    await approvals.expire(services.db, now=now)
    pending = await services.db.list_approvals(status="pending", limit=MAX_LISTED)
    return [
        approval_row(r, services.policy_for(r.tenant), now, _policy_source(visit, r.tenant))
        for r in pending
        if approvals.status_at(r, now) == "pending"
    ]


async def approvals_page(console: Console, request: Request, visit: Visit) -> Response:
    services, now = visit.services, console.clock()
    pending = await _pending_rows(console, visit)
    decided = await services.db.list_approvals(limit=HISTORY * 2, newest_first=True)
    history = [
        approval_row(r, services.policy_for(r.tenant), now, _policy_source(visit, r.tenant))
        for r in decided
        if r.status != "pending"
    ][:HISTORY]
    return console.render(
        request,
        "approvals.html",
        visit=visit,
        title="Approvals",
        pending=pending,
        history=history,
    )


async def pending_fragment(console: Console, request: Request, visit: Visit) -> Response:
    """The pending table alone, for the page's script to swap in (no reload needed)."""
    pending = await _pending_rows(console, visit)
    return console.render(request, "pending.html", visit=visit, pending=pending)


async def sessions_page(console: Console, request: Request, visit: Visit) -> Response:
    db = visit.services.db
    live = await db.list_sessions(live_at=console.clock(), limit=MAX_LISTED)
    by_tenant: dict[str, list[SessionRow]] = defaultdict(list)
    for record in live:
        by_tenant[record.tenant].append(session_row(record))
    recent = [s for s in await db.list_sessions(limit=HISTORY * 2) if s.ended_at is not None]
    return console.render(
        request,
        "sessions.html",
        visit=visit,
        title="Sessions",
        tenants=sorted(by_tenant.items()),
        ended=[session_row(s) for s in recent[:HISTORY]],
    )


async def session_page(console: Console, request: Request, visit: Visit) -> Response:
    services = visit.services
    session_id = str(request.path_params["session_id"])
    record = await services.db.get_session(session_id)
    if record is None:
        missing = f"No session {session_id} in the records."
        return console.problem(request, 404, missing, visit=visit)
    runs = await services.db.list_runs(session_id=session_id, limit=MAX_LISTED)
    grants = await services.db.list_grants(session_id=session_id, limit=MAX_LISTED)
    asked = await services.db.list_approvals(tenant=record.tenant, limit=MAX_LISTED)
    now = console.clock()
    return console.render(
        request,
        "session.html",
        visit=visit,
        title=f"Session {session_id}",
        session=session_row(record),
        runs=[run_row(r) for r in runs],
        grants=[grant_row(g) for g in grants],
        approvals=[
            approval_row(a, services.policy_for(a.tenant), now, _policy_source(visit, a.tenant))
            for a in asked
            if a.session_id == session_id
        ],
    )


async def _shown(visit: Visit, sha256: str | None) -> tuple[Block | None, bool]:
    """The first `MAX_SHOWN_BYTES` of a blob as text (None when it is not kept), and
    whether the blob holds more."""
    blobs = visit.services.blobs
    if sha256 is None or not await blobs.exists(sha256):
        return None, False
    data = await blobs.read(sha256, 0, MAX_SHOWN_BYTES + 1)
    shown = data[:MAX_SHOWN_BYTES]
    return Block(shown.decode("utf-8", errors="replace")), len(data) > MAX_SHOWN_BYTES


async def _streams(
    visit: Visit, run: RunRecord, kept: dict[str, ArtifactRecord]
) -> list[dict[str, object]]:
    """What the run printed, and for a browse run what the page showed (its findings)."""
    shown = [
        ("stdout", STREAM_PATHS["stdout"], run.stdout_bytes),
        ("stderr", STREAM_PATHS["stderr"], run.stderr_bytes),
    ]
    page = kept.get(PAGE_FILE)
    if run.language == "browse" and page is not None:
        shown.append(("The page, as the box reported it", PAGE_FILE, page.size))
    streams = []
    for name, path, total in shown:
        record = kept.get(path)
        text, _ = await _shown(visit, record.sha256 if record else None)
        streams.append(
            {
                "name": name,
                "total": total,
                "kept": record.size if record else 0,
                "shown": min(record.size, MAX_SHOWN_BYTES) if record else 0,
                "path": path,
                "text": text,
            }
        )
    return streams


async def run_page(console: Console, request: Request, visit: Visit) -> Response:
    services = visit.services
    run_id = str(request.path_params["run_id"])
    run = await services.db.get_run(run_id)
    if run is None:
        return console.problem(request, 404, f"No run {run_id} in the records.", visit=visit)
    kept = {a.path: a for a in await services.db.list_artifacts(run.id)}
    streams = set(STREAM_PATHS.values())
    screenshot = None
    if run.language == "browse":
        screenshot = await screenshot_png(services.blobs, kept.get(SCREENSHOT_FILE))
    code, code_cut = await _shown(visit, run.code_sha256)
    return console.render(
        request,
        "run.html",
        visit=visit,
        title=f"Run {run.id}",
        run=run_row(run),
        code=code,
        code_cut=code_cut,
        code_sha256=run.code_sha256,
        limit=MAX_SHOWN_BYTES,
        streams=await _streams(visit, run, kept),
        egress=[egress_row(e) for e in await services.db.list_egress(run_id=run.id, limit=1000)],
        artifacts=[artifact_row(a) for path, a in kept.items() if path not in streams],
        inputs=await services.db.list_run_inputs(run.id),
        screenshot=screenshot is not None,
        error=Block(run.error) if run.error else None,
    )


async def review_page(console: Console, request: Request, visit: Visit) -> Response:
    services = visit.services
    since = request.query_params.get("since", "30d")
    tenant = request.query_params.get("tenant") or None
    try:
        window = parse_since(since)
    except ValueError as exc:
        return console.problem(request, 400, str(exc), visit=visit)
    policy = services.policy_for(tenant) if tenant else services.policy
    label = (
        f"tenant {tenant}'s own policy"
        if tenant in services.tenant_policies
        else console.policy_label
    )
    report = await usage_report(
        services.db, policy, label=label, tenant=tenant, since=console.clock() - window
    )
    drills = await services.db.list_drills(limit=1)
    return console.render(
        request,
        "review.html",
        visit=visit,
        title="Exception review",
        report=report,
        since=since,
        since_text=iso_time(report.since),
        choices=SINCE_CHOICES,
        tenant=tenant,
        tenants=sorted(services.tenant_policies),
        rules=[
            {
                "usage": r,
                "last_use": iso_time(r.last_use) if r.last_use is not None else "never",
            }
            for r in report.rules
        ],
        denied=[{"entry": d, "last": iso_time(d.last_time)} for d in report.denied],
        drill=drills[0] if drills else None,
        drill_time=iso_time(drills[0].started_at) if drills else "",
    )


async def fleet_page(console: Console, request: Request, visit: Visit) -> Response:
    services, now = visit.services, console.clock()
    replicas = await services.db.list_replicas()
    return console.render(
        request,
        "fleet.html",
        visit=visit,
        title="Fleet",
        fleet=services.db.is_fleet,
        store=services.db.shown,
        replicas=[replica_row(r, services.instance_id, now) for r in replicas],
        instance=services.instance_id,
    )
