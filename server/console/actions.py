"""What the console's forms do: sign in with the operator token, sign out, and approve or
deny a pending approval.

A decision goes through `server.approvals.decide`, the CLI's own call: the broker's one
state machine (`broker.approvals`) moves the approval, the fleet hears of it on the
server's notices, and a refusal is the CLI's very sentence (an approval decided meanwhile,
by the CLI or another replica, is "approved, not pending"). Every form answers with a
redirect to the page it came from, whose notice says what happened.

A failed sign-in is logged with the client's address and never with what was typed, and
counts toward that address's limit (`signin.SignInLimiter`); a tenant's API key or JWT is
not the operator token and fails like any other wrong value.
"""

from __future__ import annotations

import logging
from functools import partial

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute

from airlock.errors import InvalidRequest, NotFound

from ..approvals import decide
from .app import Console, FormHandler, Visit, client_of, get, post
from .signin import COOKIE, Ticket

log = logging.getLogger("airlock.console")

BY = "console:operator"


def routes(console: Console) -> list[BaseRoute]:
    return [
        get("/sign-in", partial(sign_in_page, console)),
        post("/sign-in", partial(sign_in, console)),
        post("/sign-out", console.form(sign_out)),
        post("/approvals/{approval_id}/approve", console.form(deciding(approve=True))),
        post("/approvals/{approval_id}/deny", console.form(deciding(approve=False))),
    ]


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", ""))


def _set_cookie(
    console: Console, request: Request, response: Response, ticket: Ticket | None
) -> None:
    """Set (or with None, clear) the console's cookie: HttpOnly, SameSite=Strict, for the
    console's paths only, Secure when the request came over TLS."""
    secure = request.url.scheme == "https"
    path = _base(request) or "/"
    if ticket is None:
        response.delete_cookie(COOKIE, path=path, secure=secure, httponly=True, samesite="strict")
        return
    response.set_cookie(
        COOKIE,
        console.sessions.cookie(ticket),
        max_age=max(1, int(ticket.expires_at - console.clock())),
        path=path,
        secure=secure,
        httponly=True,
        samesite="strict",
    )


async def sign_in_page(
    console: Console, request: Request, *, status: int = 200, message: str = ""
) -> Response:
    if console.sessions.read(request.cookies.get(COOKIE), "session") is not None and not message:
        return RedirectResponse(f"{_base(request)}/", status_code=303)
    ticket = console.sessions.form_ticket()
    response = console.render(
        request,
        "sign_in.html",
        status=status,
        csrf=console.sessions.csrf(ticket),
        message=message,
    )
    _set_cookie(console, request, response, ticket)
    return response


async def sign_in(console: Console, request: Request) -> Response:
    client = client_of(request)
    wait = console.limiter.retry_after(client)
    if wait is not None:
        log.warning(
            "console sign-in refused: too many failed sign-ins",
            extra={"fields": {"client": client, "retry_after_s": wait}},
        )
        response = await sign_in_page(
            console,
            request,
            status=429,
            message=f"Too many failed sign-ins from this address; try again in {wait} s.",
        )
        response.headers["retry-after"] = str(wait)
        return response
    checked = await console.checked_form(request, "form")
    if checked is None:
        return await sign_in_page(
            console,
            request,
            status=403,
            message="This sign-in form is too old or came from another page; sign in again.",
        )
    _, fields = checked
    if not console.auth.is_operator(fields.get("token", "").strip()):
        failures = console.limiter.failed(client)
        log.warning(
            "console sign-in refused: not the operator token",
            extra={"fields": {"client": client, "failures_in_window": failures}},
        )
        return await sign_in_page(
            console,
            request,
            status=401,
            message="That is not this server's operator token (the file operator-token in "
            "its data directory); a tenant's API key does not open the console.",
        )
    ticket = console.sessions.sign_in()
    log.info("console signed in", extra={"fields": {"client": client}})
    response = RedirectResponse(f"{_base(request)}/", status_code=303)
    _set_cookie(console, request, response, ticket)
    return response


async def sign_out(console: Console, request: Request, visit: Visit, _: dict[str, str]) -> Response:
    console.sessions.sign_out(visit.ticket)
    log.info("console signed out", extra={"fields": {"client": client_of(request)}})
    response = RedirectResponse(f"{_base(request)}/sign-in", status_code=303)
    _set_cookie(console, request, response, None)
    return response


def deciding(*, approve: bool) -> FormHandler:
    async def handler(
        console: Console, request: Request, visit: Visit, _: dict[str, str]
    ) -> Response:
        approval_id = str(request.path_params["approval_id"])
        services = visit.services
        try:
            record = await decide(
                services.db,
                approval_id,
                approve=approve,
                by=BY,
                now=console.clock(),
                notices=services.notices,
            )
        except (NotFound, InvalidRequest) as exc:
            console.sessions.say(visit.ticket, f"Not decided: {exc}")
        else:
            console.sessions.say(
                visit.ticket,
                f"{record.id} {record.status}: {record.capability} for session "
                f"{record.session_id} of tenant {record.tenant}",
            )
        return RedirectResponse(f"{_base(request)}/approvals", status_code=303)

    return handler
