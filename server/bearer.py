"""Bearer tokens on Airlock's own HTTP routes (/metrics, /approvals).

The SDK checks tokens on /mcp only; custom routes call `verified_token` with the
server's verifier, so they accept exactly the keys and JWTs /mcp accepts.
"""

from __future__ import annotations

from mcp.server.auth.provider import AccessToken, TokenVerifier
from starlette.requests import Request
from starlette.responses import JSONResponse


async def verified_token(verifier: TokenVerifier, request: Request) -> AccessToken | None:
    """The request's verified bearer token, or None when it has none or a bad one."""
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return None
    return await verifier.verify_token(credential.strip())


def unauthorized() -> JSONResponse:
    return JSONResponse(
        {
            "error": "invalid_token",
            "error_description": "send Authorization: Bearer <API key or JWT>, as for /mcp",
        },
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )
