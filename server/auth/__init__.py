"""Who is calling over HTTP: bearer credentials mapped to tenants.

Belongs here: minting and hashing API keys (`api_keys`), the auth config file's model
(`config`) and loader (`load`), the issuer's keys (`jwks`), and the SDK `TokenVerifier`
that turns a bearer token into an `AirlockAccessToken` carrying the caller's tenant, with
reading that tenant back inside a tool (`verify`). Not here: what a tenant may do
(policies), serving HTTP (the CLI and app), per-tenant limits and isolation (sessions, store).

Two kinds of credential, both mapped to exactly one tenant:

- static API keys (`alk_...`), of which the config keeps only the SHA-256;
- JWTs from one issuer, checked against its JWKS (a file read at startup, or a URL fetched
  with httpx, cached, and refetched on an unknown `kid` at most once a minute), with an
  allowlist of asymmetric algorithms; the tenant comes from a configured claim.

The verifier never raises to the SDK: every failure is `None` (a 401) and one INFO log line
with the reason, never the token.

The names below are imported on first use (`airlock.lazy`): `airlock keys create` needs
the key helpers, not the SDK's verifier or httpx.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlock.lazy import homes, resolve

if TYPE_CHECKING:
    from .api_keys import API_KEY_PREFIX, HASH_PREFIX, generate_api_key, hash_api_key
    from .config import ApiKeyEntry, AuthConfig, JwtSettings
    from .jwks import SUPPORTED_ALGORITHMS, parse_jwks, read_jwks_file
    from .load import load_auth_config
    from .verify import (
        ADMIN_SCOPE,
        MAX_TOKEN_LENGTH,
        AirlockAccessToken,
        AirlockTokenVerifier,
        current_tenant,
        tenant_of,
    )

_HOMES = homes(
    {
        "api_keys": ("API_KEY_PREFIX", "HASH_PREFIX", "generate_api_key", "hash_api_key"),
        "config": ("ApiKeyEntry", "AuthConfig", "JwtSettings"),
        "jwks": ("SUPPORTED_ALGORITHMS", "parse_jwks", "read_jwks_file"),
        "load": ("load_auth_config",),
        "verify": (
            "ADMIN_SCOPE",
            "MAX_TOKEN_LENGTH",
            "AirlockAccessToken",
            "AirlockTokenVerifier",
            "current_tenant",
            "tenant_of",
        ),
    }
)

__all__ = [
    "ADMIN_SCOPE",
    "API_KEY_PREFIX",
    "HASH_PREFIX",
    "MAX_TOKEN_LENGTH",
    "SUPPORTED_ALGORITHMS",
    "AirlockAccessToken",
    "AirlockTokenVerifier",
    "ApiKeyEntry",
    "AuthConfig",
    "JwtSettings",
    "current_tenant",
    "generate_api_key",
    "hash_api_key",
    "load_auth_config",
    "parse_jwks",
    "read_jwks_file",
    "tenant_of",
]


def __getattr__(name: str) -> object:
    return resolve(__name__, _HOMES, name)
