"""The plain HTTP routes: /livez, /healthz and /readyz (unauthenticated; `readiness`),
/metrics and /approvals (the operator token, or the verifier's tokens for their own
tenant). Custom routes skip the SDK's auth, so each checks its caller itself
(`bearer.RouteAuth`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from airlock.broker import approvals
from airlock.errors import InvalidRequest, NotFound
from airlock.tools import Services

from ..approvals import decide, describe
from ..auth import ADMIN_SCOPE
from ..bearer import RouteAuth, RouteCaller, unauthorized
from ..metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from ..metrics import Metrics
from ..readiness import not_ready
from .lifespan import ForRoutes


def register(mcp: MCPServer, routes: ForRoutes, auth: RouteAuth, metrics: Metrics) -> None:
    async def alive(_: Request) -> Response:
        # Liveness: the process answers. Never fails for the database: restarting a replica
        # that reconnects by itself would only end its runs.
        return JSONResponse({"status": "ok" if routes.running is not None else "starting"})

    async def ready(_: Request) -> Response:
        running = routes.running
        if running is None:
            reason: str | None = "the server is starting or stopping"
        else:
            reason = await not_ready(running.services.db, running.claim)
        if reason is not None:
            return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
        return JSONResponse({"status": "ready"})

    # /healthz is /livez under its older name, kept for the probes configured with it.
    for path in ("/livez", "/healthz"):
        mcp.custom_route(path, methods=["GET"])(alive)
    mcp.custom_route("/readyz", methods=["GET"])(ready)

    @mcp.custom_route("/metrics", methods=["GET"])  # type: ignore[untyped-decorator]
    async def metrics_endpoint(request: Request) -> Response:
        # A tenant's key sees its own series only.
        who = await auth.caller(request)
        if who is None:
            return unauthorized()
        return Response(metrics.render(who.tenant), media_type=METRICS_CONTENT_TYPE)

    _add_approval_routes(mcp, routes.services, auth, time.time)


def _add_approval_routes(
    mcp: MCPServer,
    serving: Callable[[], Services | None],
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
            services = serving()
            if services is None:
                return JSONResponse({"error": "starting"}, status_code=503)
            return await handler(request, services, who)

        return route

    async def listing(_: Request, services: Services, who: RouteCaller) -> Response:
        await approvals.expire(services.db, now=clock())
        records = await services.db.list_approvals(tenant=who.tenant, status="pending", limit=1000)
        return JSONResponse({"approvals": [describe(r) for r in records]})

    def deciding(approve: bool) -> Handler:
        async def handler(request: Request, services: Services, who: RouteCaller) -> Response:
            approval_id = str(request.path_params["approval_id"])
            try:
                record = await decide(
                    services.db,
                    approval_id,
                    approve=approve,
                    by=who.by,
                    now=clock(),
                    notices=services.notices,
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
