"""The one gate every HTTP request passes before any route: Host, Origin and no CSRF.

Belongs here: refusing a request a web page could have made. The SDK checks Host and Origin
on /mcp only; this ASGI middleware wraps the whole app, so /healthz, /metrics, /approvals
and the SDK's metadata routes get the very same checks (the SDK's own validator, with the
settings /mcp uses), in this order:

1. Host must be one the server answers to (a DNS-rebinding page sends its own name): 421.
2. Origin, when present, must be allowed (a cross-site page sends its own): 403.
3. No CORS preflight is answered, so no other origin may send what a page cannot send
   unasked (Authorization, a JSON body, DELETE): 403.
4. A state-changing method never takes a form body (`application/x-www-form-urlencoded`,
   `multipart/form-data`, `text/plain`, the types a page may post with no preflight), and a
   POST must carry Authorization or a JSON body, neither of which a page can send
   unasked: 415.

/livez, /healthz and /readyz are held to 1-3 as well: a rebinding page must not learn that
an Airlock answers.

The one exception to 4 is the operator console's own forms (`forms_under`, /console): a
urlencoded POST under it reaches the console, whose every form handler then refuses it
without the signed-in cookie (SameSite=Strict) and the session's CSRF token
(`console.app.Console.form`). Such a post must also say it came from a page of this very
origin: an allowed Origin, or `Sec-Fetch-Site: same-origin` (which no page can forge),
since the console's `Referrer-Policy: no-referrer` makes the browser send `Origin: null`
on its forms; a null Origin counts only with that header.
Not here: who the caller is (bearer tokens, `bearer`), what a route does.
"""

from __future__ import annotations

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

SAFE_METHODS = frozenset({"GET", "HEAD"})
# The media types a browser may post cross-site without a preflight (Fetch's CORS-safelisted
# Content-Type values).
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})


class RequestGuard:
    """ASGI middleware applying the checks above to every HTTP request."""

    def __init__(
        self,
        app: ASGIApp,
        security: TransportSecuritySettings,
        *,
        forms_under: str | None = None,
    ) -> None:
        self.app = app
        self.security = TransportSecurityMiddleware(security)
        self.forms_under = forms_under

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = await self.refusal(Request(scope))
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def refusal(self, request: Request) -> Response | None:
        """The answer that refuses `request`, or None when it may reach its route."""
        console_form = self._console_form(request)
        checked = _same_origin_null(request) if console_form else request
        # The SDK's validator logs the bad Host or Origin (through logs.py, escaped).
        refused = await self.security.validate_request(checked, is_post=False)
        if refused is not None:
            return refused
        if console_form:
            return _console_form_refusal(request.headers)
        return _browser_refusal(request.method, request.headers)

    def _console_form(self, request: Request) -> bool:
        path = str(request.scope.get("path", ""))
        return (
            self.forms_under is not None
            and request.method == "POST"
            and path.startswith(self.forms_under + "/")
            and _media(request.headers) == "application/x-www-form-urlencoded"
        )


def _media(headers: Headers) -> str:
    return headers.get("content-type", "").partition(";")[0].strip().lower()


def _same_origin_null(request: Request) -> Request:
    """`request` as the Origin check sees it: a null Origin from a same-origin page (the
    browser's word, `Sec-Fetch-Site`) is left out, as if it had sent none."""
    headers = request.headers
    if headers.get("origin") != "null" or headers.get("sec-fetch-site") != "same-origin":
        return request
    scope = dict(request.scope)
    scope["headers"] = [(k, v) for k, v in request.scope["headers"] if k.lower() != b"origin"]
    return Request(scope)


def _console_form_refusal(headers: Headers) -> Response | None:
    origin = headers.get("origin")
    if (origin and origin != "null") or headers.get("sec-fetch-site") == "same-origin":
        return None
    return PlainTextResponse(
        "a console form must be posted from a console page of this server (an allowed "
        "Origin, or Sec-Fetch-Site: same-origin); open the console and use its buttons",
        status_code=403,
    )


def _browser_refusal(method: str, headers: Headers) -> Response | None:
    if method == "OPTIONS":
        return PlainTextResponse(
            "Airlock answers no CORS preflight: pages on other origins may not call it",
            status_code=403,
        )
    if method in SAFE_METHODS:
        return None
    media = _media(headers)
    if media in FORM_TYPES:
        return PlainTextResponse(
            f"Airlock takes no form posts ({media}): send JSON or no body",
            status_code=415,
        )
    if method == "POST" and "authorization" not in headers and media != "application/json":
        return PlainTextResponse(
            "a POST needs an Authorization header or Content-Type: application/json",
            status_code=415,
        )
    return None
