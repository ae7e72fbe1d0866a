"""Verifying bearer credentials: API keys and JWTs to `AirlockAccessToken`s carrying the
caller's tenant, and reading that tenant back inside a tool.

The verifier never raises to the SDK: every failure is `None` (a 401) and one INFO log
line with the reason, never the token. Not here: what the config says (`server.auth.config`),
where the issuer's keys come from (`server.auth.jwks`).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry
from joserfc.jwt import JWTClaimsRegistry
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from .api_keys import hash_api_key
from .config import ApiKeyEntry, AuthConfig, JwtSettings, tenant_name_problem
from .jwks import AllowlistRegistry, JwksUrlKeys, short_reason

log = logging.getLogger(__name__)

#: Longer bearer tokens are refused before any parsing or hashing.
MAX_TOKEN_LENGTH = 8 * 1024


class AirlockAccessToken(AccessToken):
    """What the SDK keeps for an authenticated request; `tenant` is the caller's tenant.

    `token` is the SHA-256 of the bearer credential (`sha256:<hex>`), never the credential.
    API keys: `client_id` and `key_id` are the key's id. JWTs: `client_id` is
    `<tenant>/<azp|client_id|sub>` (so the SDK's principal, and with it session ownership,
    differs per tenant), `subject` is `sub`, `claims` the verified claims, `resource` the
    configured audience.
    """

    tenant: str
    key_id: str | None = None


def tenant_of(access_token: AccessToken) -> str:
    """The tenant of a token returned by `AirlockTokenVerifier`.

    Raises TypeError for any other token: a server wired to another verifier is a bug,
    and guessing a tenant would be a cross-tenant leak.
    """
    if isinstance(access_token, AirlockAccessToken):
        return access_token.tenant
    raise TypeError(f"not an Airlock access token: {type(access_token).__name__}")


ADMIN_SCOPE = "airlock:admin"
"""Lets a caller decide its own tenant's pending approvals over HTTP."""


def current_tenant() -> str | None:
    """The tenant of the caller of the current MCP request, for use inside tools.

    None when the request carries no token (stdio, or HTTP without auth): the caller is
    then the local user (`server.config.LOCAL_TENANT`), as the transport decides.
    """
    token = get_access_token()
    return None if token is None else tenant_of(token)


# --- The verifier ---------------------------------------------------------------------


class _Rejected(Exception):
    """A token failed a check; the message is the reason to log (never the token)."""


@dataclass(frozen=True)
class _KeyRecord:
    hash: bytes
    entry: ApiKeyEntry


class AirlockTokenVerifier:
    """The SDK's `TokenVerifier` for Airlock: API keys and JWTs to `AirlockAccessToken`s.

    Pass it to `MCPServer(token_verifier=...)`. It checks the JWT audience itself, so set
    `AuthSettings(validate_token_resource=False)`.

    `clock` returns Unix seconds (tests pass a fixed one); `transport` replaces httpx's
    network transport for the JWKS URL. A JWKS file's keys are the ones read when
    `config` was validated; the file is not read again.
    """

    def __init__(
        self,
        config: AuthConfig,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._clock = clock
        self._keys = tuple(_KeyRecord(e.hash.encode("ascii"), e) for e in config.keys)
        self._jwt = config.jwt
        self._registry: JWSRegistry | None = None
        self._keyset: KeySet | None = None
        self._url_keys: JwksUrlKeys | None = None
        if self._jwt is not None:
            self._registry = AllowlistRegistry(
                algorithms=list(self._jwt.algorithms), strict_check_header=False
            )
            if self._jwt.jwks_url is not None:
                self._url_keys = JwksUrlKeys(self._jwt.jwks_url, clock=clock, transport=transport)
            else:
                self._keyset = KeySet(list(self._jwt.jwks_keys))

    async def verify_token(self, token: str) -> AccessToken | None:
        """An `AirlockAccessToken` for a valid API key or JWT, else None. Never raises."""
        try:
            return await self._verify(token)
        except _Rejected as reason:
            log.info("bearer token refused: %s", reason)
        except Exception:
            # A bug, not a bad token; still a refusal. The traceback holds no locals.
            log.warning("bearer token refused: unexpected error", exc_info=True)
        return None

    async def _verify(self, token: str) -> AirlockAccessToken:
        if not token:
            raise _Rejected("empty")
        if len(token) > MAX_TOKEN_LENGTH:
            raise _Rejected(f"longer than {MAX_TOKEN_LENGTH} characters")
        entry = self._match_api_key(token)
        if entry is not None:
            return AirlockAccessToken(
                token=entry.hash,
                client_id=entry.id,
                scopes=[ADMIN_SCOPE] if entry.admin else [],
                tenant=entry.tenant,
                key_id=entry.id,
            )
        if self._jwt is None or token.count(".") != 2:
            raise _Rejected("unknown API key")
        return await self._verify_jwt(token, self._jwt)

    def _match_api_key(self, token: str) -> ApiKeyEntry | None:
        candidate = hash_api_key(token).encode("ascii")
        found: ApiKeyEntry | None = None
        # Every entry is compared, each in constant time, so timing says nothing about
        # which entry (or whether any) matched.
        for record in self._keys:
            if hmac.compare_digest(record.hash, candidate) and found is None:
                found = record.entry
        return found

    async def _verify_jwt(self, token: str, settings: JwtSettings) -> AirlockAccessToken:
        assert self._registry is not None
        try:
            obj = jws.extract_compact(token.encode("ascii"), registry=self._registry)
        except (JoseError, UnicodeEncodeError, ValueError) as exc:
            raise _Rejected(f"not a JWT: {short_reason(exc)}") from None
        header = obj.headers()
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in settings.algorithms:
            raise _Rejected(f"JWT algorithm {_clip(alg)} is not allowed")
        if "crit" in header or "b64" in header:
            raise _Rejected("JWT header uses 'crit' or 'b64'")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _Rejected("JWT 'kid' is not a string")
        keyset = await self._keyset_for(kid)
        if keyset is None:
            raise _Rejected("no JWKS keys available")
        try:
            valid = jws.validate_compact(obj, keyset, registry=self._registry)
        except (JoseError, ValueError) as exc:
            raise _Rejected(f"JWT key {_clip(kid)}: {short_reason(exc)}") from None
        if not valid:
            raise _Rejected("JWT signature does not verify")

        try:
            claims = json.loads(obj.payload or b"")
        except ValueError:
            raise _Rejected("JWT payload is not JSON") from None
        if not isinstance(claims, dict):
            raise _Rejected("JWT payload is not a JSON object")
        checks = JWTClaimsRegistry(
            now=lambda: int(self._clock()),
            leeway=settings.leeway_s,
            iss={"essential": True, "value": settings.issuer},
            aud={"essential": True, "value": settings.audience},
            exp={"essential": True},
        )
        try:
            checks.validate(claims)
        except JoseError as exc:
            raise _Rejected(f"JWT claims: {short_reason(exc)}") from None

        tenant = claims.get(settings.tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise _Rejected(f"JWT claim {settings.tenant_claim!r} is missing or not a string")
        problem = tenant_name_problem(tenant)
        if problem is not None:
            raise _Rejected(f"JWT claim {settings.tenant_claim!r} is not a tenant name: {problem}")
        subject = claims.get("sub") if isinstance(claims.get("sub"), str) else None
        caller = next(
            (
                v
                for v in (claims.get("azp"), claims.get("client_id"), subject)
                if isinstance(v, str)
            ),
            "-",
        )
        return AirlockAccessToken(
            token=hash_api_key(token),
            client_id=f"{tenant}/{caller}",
            scopes=_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=settings.audience,
            subject=subject,
            claims=claims,
            tenant=tenant,
        )

    async def _keyset_for(self, kid: str | None) -> KeySet | None:
        if self._url_keys is None:
            return self._keyset
        return await self._url_keys.keyset_for(kid)


def _scopes(claims: Mapping[str, Any]) -> list[str]:
    scope = claims.get("scope")
    if isinstance(scope, str):
        return scope.split()
    scp = claims.get("scp")
    if isinstance(scp, list):
        return [s for s in scp if isinstance(s, str)]
    return []


def _clip(value: object) -> str:
    """A header value an attacker chose, safe to log."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
