"""The console as a Starlette app (mounted at /console): its routes, the environment its
templates render in, the headers every response carries, and the two gates every handler
passes: `page` (a signed-in cookie) and `form` (that cookie and the session's CSRF token).

Everything a page shows may have been written by a sandbox, a web page or a tampered
database, so the templates never print a value as markup: autoescaping is on for every
template, and `visible` (the environment's `finalize`, applied to every `{{ }}`) writes each
control and invisible character of a string as `<U+XXXX>` through `terminal.safe_line`
(a `views.Block` through `safe_block`, keeping its newlines and tabs). Only the
templates' own markup (macros, `Markup`) passes unchanged. No page has an inline script
or style: the CSP below refuses them, and the one script is a static file.

Not here: what each page reads (`pages.py`), what each form does (`actions.py`), files
and images (`files.py`), the cookie and CSRF rules (`signin.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airlock.broker.approvals import status_at
from airlock.tools import Services

from ..bearer import RouteAuth
from ..terminal import safe_block, safe_line
from .signin import COOKIE, ConsoleSessions, Kind, SignInLimiter, Ticket
from .views import Block

log = logging.getLogger("airlock.console")

HERE = Path(__file__).parent
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
HEADERS = (
    ("content-security-policy", CSP),
    ("referrer-policy", "no-referrer"),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
    # Every page shows run content or who is signed in: none is kept by a cache.
    ("cache-control", "no-store"),
)
MAX_FORM_BYTES = 16 * 1024
"""The console's forms carry a token and a CSRF field: a body past this is refused."""
MAX_PENDING = 1000


def visible(value: Any) -> Any:
    """Jinja's `finalize`: every string printed shows its control and invisible characters."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, Block):
        return safe_block(value)
    if isinstance(value, str):
        return safe_line(value)
    return value


def environment() -> Environment:
    return Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=True,
        finalize=visible,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


@dataclass(frozen=True)
class Visit:
    """A signed-in request that passed its gate: what every page and form gets."""

    ticket: Ticket
    services: Services
    csrf: str
    pending: int
    """Approvals pending now, for the title and the menu."""


PageHandler = Callable[["Console", Request, Visit], Awaitable[Response]]
FormHandler = Callable[["Console", Request, Visit, dict[str, str]], Awaitable[Response]]


@dataclass
class Console:
    """What every handler of one console shares."""

    templates: Environment
    sessions: ConsoleSessions
    limiter: SignInLimiter
    auth: RouteAuth
    serving: Callable[[], Services | None]
    policy_label: str
    clock: Callable[[], float]

    def render(
        self,
        request: Request,
        template: str,
        *,
        visit: Visit | None = None,
        status: int = 200,
        headers: dict[str, str] | None = None,
        **context: Any,
    ) -> HTMLResponse:
        base = str(request.scope.get("root_path", ""))
        notices = self.sessions.notices(visit.ticket) if visit is not None else []
        html = self.templates.get_template(template).render(
            base=base, visit=visit, notices=notices, **context
        )
        return HTMLResponse(html, status_code=status, headers=headers)

    def problem(
        self, request: Request, status: int, message: str, *, visit: Visit | None = None
    ) -> HTMLResponse:
        return self.render(request, "problem.html", visit=visit, status=status, message=message)

    async def visit(self, ticket: Ticket, services: Services) -> Visit:
        now = self.clock()
        pending = await services.db.list_approvals(status="pending", limit=MAX_PENDING)
        count = sum(status_at(r, now) == "pending" for r in pending)
        return Visit(ticket, services, self.sessions.csrf(ticket), count)

    def page(self, handler: PageHandler) -> Callable[[Request], Awaitable[Response]]:
        """A page for the signed-in only; anyone else is sent to the sign-in form."""

        async def endpoint(request: Request) -> Response:
            ticket = self.sessions.read(request.cookies.get(COOKIE), "session")
            if ticket is None:
                base = request.scope.get("root_path", "")
                return RedirectResponse(f"{base}/sign-in", status_code=303)
            services = self.serving()
            if services is None:
                return self.problem(request, 503, "The server is starting or stopping; reload.")
            return await handler(self, request, await self.visit(ticket, services))

        return endpoint

    def form(self, handler: FormHandler) -> Callable[[Request], Awaitable[Response]]:
        """A state change: it needs the signed-in cookie and the session's CSRF token in the
        form (hidden field `csrf`), checked before anything else happens."""

        async def endpoint(request: Request) -> Response:
            checked = await self.checked_form(request, "session")
            if checked is None:
                return self.refused(request)
            ticket, fields = checked
            services = self.serving()
            if services is None:
                return self.problem(request, 503, "The server is starting or stopping; retry.")
            return await handler(self, request, await self.visit(ticket, services), fields)

        return endpoint

    async def checked_form(
        self, request: Request, kind: Kind
    ) -> tuple[Ticket, dict[str, str]] | None:
        """The cookie's ticket of `kind` and the form's fields, when the form carries that
        ticket's CSRF token; None otherwise."""
        ticket = self.sessions.read(request.cookies.get(COOKIE), kind)
        fields = await read_form(request)
        if ticket is None or fields is None:
            return None
        if not self.sessions.csrf_ok(ticket, fields.get("csrf")):
            return None
        return ticket, fields

    def refused(self, request: Request) -> HTMLResponse:
        log.warning(
            "console form refused: no signed-in cookie or no matching CSRF token",
            extra={"fields": {"path": request.url.path, "client": client_of(request)}},
        )
        return self.problem(
            request,
            403,
            "This form did not come from a signed-in console page of this server (its "
            "cookie or CSRF token is missing, expired or wrong); open the console, sign in "
            "and try again.",
        )


def client_of(request: Request) -> str:
    return request.client.host if request.client is not None else "-"


async def read_form(request: Request) -> dict[str, str] | None:
    """The fields of a urlencoded form of at most `MAX_FORM_BYTES`; None for anything else
    (another type, too long, not UTF-8, a field twice)."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            return None
    try:
        pairs = parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=20
        )
    except (UnicodeDecodeError, ValueError):
        return None
    fields = dict(pairs)
    return fields if len(fields) == len(pairs) else None


class SecurityHeaders:
    """Adds `HEADERS` to every response of the console that did not set its own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS:
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, sending)


def get(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
    return Route(path, endpoint, methods=["GET"])


def post(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
    return Route(path, endpoint, methods=["POST"])
