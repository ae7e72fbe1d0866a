"""Who calls Airlock's own HTTP routes (/metrics, /approvals): the operator or a tenant;
and whether a credential is the operator token (the console's sign-in asks `is_operator`).

The SDK checks tokens on /mcp only; these routes ask `RouteAuth.caller`, which accepts
the operator token (the file `operator-token` in the data directory: random, 0600, made
by the first `airlock serve --http`, so whoever may read the data directory is the
operator) and the keys and JWTs /mcp accepts, each as its tenant. There is no anonymous
caller, on loopback either: a web page reaching 127.0.0.1 holds none of these.
Not here: the Host/Origin and CSRF checks every request passes first (`guard`).
"""

from __future__ import annotations

import base64
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from mcp.server.auth.provider import TokenVerifier
from starlette.requests import Request
from starlette.responses import JSONResponse

from airlock.errors import InvalidRequest
from airlock.store import create_private_file, private_file_problem

from .auth import ADMIN_SCOPE, tenant_of

log = logging.getLogger(__name__)

OPERATOR_TOKEN_FILE = "operator-token"
OPERATOR_TOKEN_PREFIX = "alo_"
_TOKEN_BYTES = 32
_TOKEN_FORM = re.compile(OPERATOR_TOKEN_PREFIX + r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True)
class RouteCaller:
    """A verified caller of a route."""

    tenant: str | None
    """The caller's tenant; None for the operator, who sees and decides every tenant's."""
    by: str
    """Who, for the record of a decision: `http:operator` or `http:<key id>`."""
    admin: bool
    """May decide approvals (of `tenant`, or of all for the operator)."""


class RouteAuth:
    """Turns a request's `Authorization: Bearer` into a `RouteCaller`, or None."""

    def __init__(self, verifier: TokenVerifier | None, operator_token: str | None) -> None:
        self._verifier = verifier
        self._operator = operator_token.encode() if operator_token else None

    def is_operator(self, credential: str) -> bool:
        """Whether `credential` is the operator token (compared in constant time); the one
        check of it, for these routes and the console's sign-in."""
        return self._operator is not None and hmac.compare_digest(
            credential.encode("utf-8", "surrogatepass"), self._operator
        )

    async def caller(self, request: Request) -> RouteCaller | None:
        """The verified caller, or None when the request has no good credential."""
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            return None
        if self.is_operator(credential):
            return RouteCaller(tenant=None, by="http:operator", admin=True)
        if self._verifier is None:
            return None
        token = await self._verifier.verify_token(credential)
        if token is None:
            return None
        return RouteCaller(
            tenant=tenant_of(token), by=f"http:{token.client_id}", admin=ADMIN_SCOPE in token.scopes
        )


def unauthorized() -> JSONResponse:
    return JSONResponse(
        {
            "error": "invalid_token",
            "error_description": "send Authorization: Bearer <the operator token (the file "
            f"{OPERATOR_TOKEN_FILE} in the server's data directory), or an API key or JWT>",
        },
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


def operator_token(data_dir: Path) -> str:
    """The operator token of `data_dir`, made now (random, 0600) if it has none.

    An existing file must be a regular file no one but its owner may read or write, and
    hold one token (InvalidRequest naming the fix otherwise).
    """
    path = data_dir / OPERATOR_TOKEN_FILE
    try:
        if not path.exists():
            _create(path)
        return _read(path)
    except OSError as exc:
        raise InvalidRequest(
            f"cannot make or read the operator token {path}: {exc.strerror or exc}; "
            "check the data directory's owner and permissions"
        ) from exc


def _create(path: Path) -> None:
    raw = base64.urlsafe_b64encode(secrets.token_bytes(_TOKEN_BYTES)).rstrip(b"=")
    # If another server made one meanwhile, that one is the token.
    create_private_file(path, OPERATOR_TOKEN_PREFIX.encode() + raw + b"\n")
    log.info("made the operator token %s (for /approvals and /metrics)", path)


def _read(path: Path) -> str:
    # Not followed if a link: the token must be this file, not whatever it points at.
    problem = private_file_problem(path, path.lstat().st_mode)
    if problem is not None:
        raise InvalidRequest(f"operator token {problem}")
    token = path.read_text("ascii", errors="replace").strip()
    if not _TOKEN_FORM.fullmatch(token):
        # Deliberately says nothing about what the file holds.
        raise InvalidRequest(
            f"operator token {path} does not hold a token; remove it and restart the server "
            "to make a new one"
        )
    return token
