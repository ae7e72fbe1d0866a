"""Who is calling over HTTP: bearer credentials mapped to tenants.

Belongs here: the auth config file (model and loader), minting and hashing API keys, the
SDK `TokenVerifier` that turns a bearer token into an `AirlockAccessToken` carrying the
caller's tenant, and reading that tenant back inside a tool. Not here: what a tenant may do
(policies), serving HTTP (the CLI and app), per-tenant limits and isolation (sessions, store).

Two kinds of credential, both mapped to exactly one tenant:

- static API keys (`alk_...`), of which the config keeps only the SHA-256;
- JWTs from one issuer, checked against its JWKS (a file read at startup, or a URL fetched
  with httpx, cached, and refetched on an unknown `kid` at most once a minute), with an
  allowlist of asymmetric algorithms; the tenant comes from a configured claim.

The verifier never raises to the SDK: every failure is `None` (a 401) and one INFO log line
with the reason, never the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import anyio
import httpx
from joserfc import jws
from joserfc.errors import JoseError, UnsupportedAlgorithmError
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import JWKRegistry, Key, KeySet
from joserfc.jws import JWSRegistry
from joserfc.jwt import JWTClaimsRegistry
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from airlock.errors import AuthConfigInvalid
from policies import describe_problem

from .config import LOCAL_TENANT

log = logging.getLogger(__name__)

API_KEY_PREFIX = "alk_"
HASH_PREFIX = "sha256:"
#: Longer bearer tokens are refused before any parsing or hashing.
MAX_TOKEN_LENGTH = 8 * 1024
TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
#: Asymmetric JWS algorithms a config may allow. HS* are refused on purpose: a shared secret
#: lets every verifier mint tokens, and keys from a JWKS must never double as HMAC secrets.
#: Intersected with what the installed joserfc implements (`Ed25519` is RFC 9864, newer).
SUPPORTED_ALGORITHMS = frozenset(
    {"EdDSA", "Ed25519", "Ed448", "ES256", "ES384", "ES512"}
    | {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
) & frozenset(JWSRegistry.algorithms)
#: Unknown-`kid` refetches of a JWKS URL are at least this far apart (also after failures).
JWKS_REFETCH_INTERVAL_S = 60.0
#: A fetched JWKS is refetched when older than this, so removed (revoked) keys go away.
JWKS_MAX_AGE_S = 3600.0
JWKS_MAX_BYTES = 1024 * 1024
JWKS_FETCH_TIMEOUT_S = 10.0
MIN_RSA_BITS = 2048

_CROSS_ENTRY = "airlock_cross_entry"
_TENANT_RULE = (
    "use 1-63 lowercase letters, digits and '-', starting with a letter or digit"
    f" ('{LOCAL_TENANT}' is reserved for the local stdio user)"
)


# --- API keys -------------------------------------------------------------------------


def generate_api_key() -> tuple[str, str]:
    """A new API key and the hash to put in the config: `("alk_...", "sha256:<hex>")`.

    The key is 32 random bytes, URL-safe base64 without padding; show it once and keep
    only the hash.
    """
    raw = base64.urlsafe_b64encode(secrets.token_bytes(32)).rstrip(b"=").decode("ascii")
    key = API_KEY_PREFIX + raw
    return key, hash_api_key(key)


def hash_api_key(key: str) -> str:
    """`"sha256:<hex>"` of the key's UTF-8 bytes, the form the config stores."""
    return HASH_PREFIX + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


# --- Config model ---------------------------------------------------------------------


def _check_tenant(value: str) -> str:
    if not TENANT_PATTERN.fullmatch(value) or value == LOCAL_TENANT:
        raise PydanticCustomError("tenant_name", f"{value!r} is not a tenant name: {_TENANT_RULE}")
    return value


def _check_key_id(value: str) -> str:
    if not KEY_ID_PATTERN.fullmatch(value):
        raise PydanticCustomError(
            "key_id",
            f"{value!r} is not a key id: use up to 128 letters, digits and '._@-',"
            " starting with a letter or digit",
        )
    return value


def _normalize_hash(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _check_hash(value: str) -> str:
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", value):
        raise PydanticCustomError(
            "key_hash",
            "not a key hash: write 'sha256:' and 64 hex digits, as printed when the key was"
            " generated (never the key itself)",
        )
    return value


def _check_algorithm(value: str) -> str:
    if value.lower() == "none":
        raise PydanticCustomError(
            "algorithm", "'none' is not allowed: unsigned tokens are never accepted"
        )
    if value.upper().startswith("HS"):
        raise PydanticCustomError(
            "algorithm",
            f"{value!r} is not allowed: shared-secret (HS*) algorithms let every verifier mint"
            f" tokens; use one of {', '.join(sorted(SUPPORTED_ALGORITHMS))}",
        )
    if value not in SUPPORTED_ALGORITHMS:
        raise PydanticCustomError(
            "algorithm",
            f"{value!r} is not a supported algorithm; use one of"
            f" {', '.join(sorted(SUPPORTED_ALGORITHMS))}",
        )
    return value


def _check_algorithms(value: tuple[str, ...]) -> tuple[str, ...]:
    # An AfterValidator, not min_length: that would also fire when every listed name was
    # refused, repeating those problems as "empty".
    if not value:
        raise PydanticCustomError(
            "algorithms", 'list at least one algorithm, for example ["EdDSA", "ES256"]'
        )
    return value


def _check_jwks_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme == "https" and parts.hostname:
        return value
    if parts.scheme == "http" and parts.hostname and _is_loopback(parts.hostname):
        return value
    raise PydanticCustomError(
        "jwks_url",
        f"{value!r} is not an https URL; keys fetched over plain http could be swapped"
        " (http is accepted only for loopback addresses)",
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _resolve_path(value: Path | None, info: ValidationInfo) -> Path | None:
    """Relative paths in a config file are relative to the file's directory."""
    if value is None:
        return None
    value = value.expanduser()
    base = (info.context or {}).get("base_dir")
    if not value.is_absolute() and isinstance(base, Path):
        return base / value
    return value


Tenant = Annotated[str, AfterValidator(_check_tenant)]
KeyHash = Annotated[str, BeforeValidator(_normalize_hash), AfterValidator(_check_hash)]
Algorithm = Annotated[str, AfterValidator(_check_algorithm)]


class ApiKeyEntry(BaseModel):
    """One static API key (`[[keys]]`); the key itself is never stored, only its hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Annotated[str, AfterValidator(_check_key_id)]
    """Label for logs and audit; unique in the file. Required."""
    tenant: Tenant
    """The tenant every call with this key acts as. Required."""
    hash: KeyHash
    """`sha256:<hex>` of the key, as printed by `generate_api_key`. Required."""
    policy: Path | None = None
    """Policy file for this tenant; missing means the server's default policy. Relative
    paths are relative to the auth config file. Keys of one tenant must agree on it."""
    admin: bool = False
    """Whether this key may decide its tenant's pending approvals over HTTP (the scope
    `airlock:admin`, which a JWT carries in its `scope` claim). Missing: false."""

    @field_validator("policy")
    @classmethod
    def _resolve_policy(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return _resolve_path(value, info)


class JwtSettings(BaseModel):
    """JWTs from one issuer (`[jwt]`); missing means JWTs are not accepted at all."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(min_length=1)
    """Exact value required in the `iss` claim."""
    audience: str = Field(min_length=1)
    """Value required in the `aud` claim (a string, or one entry of a list)."""
    jwks_file: Path | None = None
    """JWKS file with the issuer's public keys, read once at startup. Exactly one of
    `jwks_file` and `jwks_url`. Relative paths are relative to the auth config file."""
    jwks_url: Annotated[str, AfterValidator(_check_jwks_url)] | None = None
    """https URL of the issuer's JWKS, fetched on first use, refetched hourly and on an
    unknown `kid` (at most once a minute). Exactly one of `jwks_file` and `jwks_url`."""
    algorithms: Annotated[tuple[Algorithm, ...], AfterValidator(_check_algorithms)]
    """Allowed `alg` header values; a token with any other is refused. Never empty."""
    tenant_claim: str = Field(default="tenant", min_length=1)
    """Claim that names the tenant; a token without it (or with a bad name) is refused."""
    leeway_s: int = Field(default=30, ge=0, le=300)
    """Clock skew tolerated on `exp`, `nbf` and `iat`, in seconds."""

    @field_validator("jwks_file")
    @classmethod
    def _resolve_jwks_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return _resolve_path(value, info)

    @model_validator(mode="after")
    def _one_jwks_source(self) -> JwtSettings:
        problem = _jwks_source_problem(self.jwks_file, self.jwks_url)
        if problem:
            raise PydanticCustomError(_CROSS_ENTRY, problem)
        return self


class AuthConfig(BaseModel):
    """The auth config file: who may call the HTTP server and as which tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: tuple[ApiKeyEntry, ...] = ()
    """Static API keys; empty means none are accepted."""
    jwt: JwtSettings | None = None
    """JWT issuer; missing means JWTs are not accepted. At least one of the two is needed."""

    @model_validator(mode="after")
    def _consistent(self) -> AuthConfig:
        problems = _cross_entry_problems(
            [entry.model_dump() for entry in self.keys], self.jwt is not None
        )
        if problems:
            raise PydanticCustomError(_CROSS_ENTRY, "; ".join(problems))
        return self

    def policy_for(self, tenant: str) -> Path | None:
        """The policy file configured for `tenant`; None means the server's default."""
        for entry in self.keys:
            if entry.tenant == tenant and entry.policy is not None:
                return entry.policy
        return None

    @property
    def tenants(self) -> frozenset[str]:
        """Tenants named by API keys (JWT tenants are known only from their tokens)."""
        return frozenset(entry.tenant for entry in self.keys)


def _jwks_source_problem(jwks_file: object, jwks_url: object) -> str | None:
    if jwks_file is not None and jwks_url is not None:
        return "jwt: set only one of jwks_file and jwks_url"
    if jwks_file is None and jwks_url is None:
        return "jwt: set jwks_file (a JWKS file) or jwks_url (the issuer's https JWKS URL)"
    return None


def _cross_entry_problems(keys: list[Any], has_jwt: bool) -> list[str]:
    """Problems spanning entries; tolerant of malformed entries so the loader can list
    these next to per-field problems."""
    entries = [entry for entry in keys if isinstance(entry, Mapping)]
    problems: list[str] = []
    if not keys and not has_jwt:
        problems.append("no credentials: add [[keys]] entries, a [jwt] table, or both")
    ids = Counter(e["id"] for e in entries if isinstance(e.get("id"), str))
    problems += [
        f"keys: id {key_id!r} is used {n} times; give each key its own id"
        for key_id, n in ids.items()
        if n > 1
    ]
    hashes = Counter(_normalize_hash(e["hash"]) for e in entries if isinstance(e.get("hash"), str))
    for key_hash, n in hashes.items():
        if n > 1:
            holders = [
                str(e.get("id")) for e in entries if _normalize_hash(e.get("hash")) == key_hash
            ]
            problems.append(
                f"keys: {', '.join(holders)} have the same hash; generate one key per entry"
            )
    policies: dict[str, set[str]] = {}
    for e in entries:
        if isinstance(e.get("tenant"), str):
            policy = e.get("policy")
            policies.setdefault(e["tenant"], set()).add("" if policy is None else str(policy))
    problems += [
        f"keys: tenant {tenant!r} has keys with different policies; use one policy per tenant"
        for tenant, seen in policies.items()
        if len(seen) > 1
    ]
    return problems


# --- Loading --------------------------------------------------------------------------


def load_auth_config(path: Path) -> AuthConfig:
    """Load and validate the auth config TOML at `path`, including its JWKS file.

    Raises `AuthConfigInvalid` naming the file and listing every problem found.
    """
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AuthConfigInvalid(source, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise AuthConfigInvalid(
            source, [f"not UTF-8 text: {exc.reason} at byte {exc.start}"]
        ) from exc
    except tomllib.TOMLDecodeError as exc:
        raise AuthConfigInvalid(source, [f"not valid TOML: {exc}"]) from exc
    return _validate(source, data, base_dir=path.parent)


def _validate(source: str, data: dict[str, Any], *, base_dir: Path) -> AuthConfig:
    problems: list[str] = []
    config: AuthConfig | None = None
    try:
        config = AuthConfig.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        schema = AuthConfig.model_json_schema()
        problems += [describe_problem(e, schema) for e in exc.errors() if e["type"] != _CROSS_ENTRY]
    # Checks across entries and tables, on the raw data so they are listed even when
    # some entries failed field validation (pydantic skips model validators then).
    keys = data.get("keys", [])
    jwt = data.get("jwt")
    problems += _cross_entry_problems(keys if isinstance(keys, list) else [], jwt is not None)
    if isinstance(jwt, Mapping):
        problem = _jwks_source_problem(jwt.get("jwks_file"), jwt.get("jwks_url"))
        if problem:
            problems.append(problem)
        jwks_file = jwt.get("jwks_file")
        if isinstance(jwks_file, str) and jwt.get("jwks_url") is None:
            file_path = Path(jwks_file).expanduser()
            _, jwks_problems = read_jwks_file(base_dir / file_path)
            problems += [f"jwt.jwks_file: {p}" for p in jwks_problems]
    if problems or config is None:
        raise AuthConfigInvalid(source, problems or ["invalid"])
    return config


# --- JWKS -----------------------------------------------------------------------------


def read_jwks_file(path: Path) -> tuple[list[Key], list[str]]:
    """The usable public keys of the JWKS file at `path`, and its problems."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return [], [f"cannot read {path}: {exc.strerror or exc}"]
    return parse_jwks(raw)


def parse_jwks(raw: bytes) -> tuple[list[Key], list[str]]:
    """The usable public signing keys of a JWKS document, and what is wrong with it.

    Refused: symmetric (`oct`) keys, private key material, encryption-only keys, RSA
    below 2048 bits, duplicate `kid`s, and anything joserfc cannot import.
    """
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        return [], [f"not JSON: {exc}"]
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        return [], ['not a JWKS: expected {"keys": [ ... ]} with at least one key']
    keys: list[Key] = []
    problems: list[str] = []
    for index, entry in enumerate(entries):
        where = f"keys[{index}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        kty = entry.get("kty")
        if kty not in ("OKP", "EC", "RSA"):
            problems.append(
                f"{where}: key type {kty!r} is not accepted; publish OKP, EC or RSA public keys"
            )
            continue
        if entry.get("use") not in (None, "sig"):
            problems.append(f"{where}: 'use' is {entry.get('use')!r}; signing keys need 'sig'")
            continue
        bits = _rsa_bits(entry) if kty == "RSA" else None
        if bits is not None and bits < MIN_RSA_BITS:
            # Checked before import: joserfc warns (not refuses) on short RSA keys.
            problems.append(f"{where}: RSA key of {bits} bits; use at least {MIN_RSA_BITS}")
            continue
        try:
            key = JWKRegistry.import_key(entry)
        except (JoseError, ValueError, TypeError, KeyError) as exc:
            problems.append(f"{where}: not a usable key: {exc}")
            continue
        if key.is_private:
            problems.append(f"{where}: contains private key material; publish only the public key")
            continue
        keys.append(key)
    kids = Counter(key.kid for key in keys if key.kid is not None)
    problems += [
        f"kid {kid!r} appears {n} times; kids must be unique" for kid, n in kids.items() if n > 1
    ]
    if len(keys) > 1 and any(key.kid is None for key in keys):
        problems.append("with several keys every key needs a 'kid'")
    return keys, problems


def _rsa_bits(entry: Mapping[str, Any]) -> int | None:
    modulus = entry.get("n")
    if not isinstance(modulus, str):
        return None
    try:
        raw = base64.urlsafe_b64decode(modulus + "=" * (-len(modulus) % 4))
    except ValueError:
        return None
    return int.from_bytes(raw, "big").bit_length()


class _AllowlistRegistry(JWSRegistry):
    """A JWS registry that accepts exactly the configured algorithms.

    joserfc's own check falls back to its "recommended" list when the allowlist is empty and
    warns on some names (`EdDSA`); here an empty allowlist allows nothing and nothing warns.
    """

    def get_alg(self, name: str) -> JWSAlgModel:
        if not self.allowed or name not in self.allowed or name not in self.algorithms:
            raise UnsupportedAlgorithmError(f"algorithm {name!r} is not allowed")
        return self.algorithms[name]


# --- Access tokens and the caller's tenant --------------------------------------------


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
    network transport for the JWKS URL. Raises `AuthConfigInvalid` if the JWKS file
    cannot be read or holds no usable key.
    """

    def __init__(
        self,
        config: AuthConfig,
        *,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._transport = transport
        self._keys = tuple(_KeyRecord(e.hash.encode("ascii"), e) for e in config.keys)
        self._jwt = config.jwt
        self._registry: JWSRegistry | None = None
        self._keyset: KeySet | None = None
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._fetch_lock = anyio.Lock()
        if self._jwt is not None:
            self._registry = _AllowlistRegistry(
                algorithms=list(self._jwt.algorithms), strict_check_header=False
            )
            if self._jwt.jwks_file is not None:
                keys, problems = read_jwks_file(self._jwt.jwks_file)
                if problems or not keys:
                    raise AuthConfigInvalid(str(self._jwt.jwks_file), problems or ["no usable key"])
                self._keyset = KeySet(keys)

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
            raise _Rejected(f"not a JWT: {_short(exc)}") from None
        header = obj.headers()
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in settings.algorithms:
            raise _Rejected(f"JWT algorithm {_clip(alg)} is not allowed")
        if "crit" in header or "b64" in header:
            raise _Rejected("JWT header uses 'crit' or 'b64'")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _Rejected("JWT 'kid' is not a string")
        keyset = await self._keyset_for(kid, settings)
        if keyset is None:
            raise _Rejected("no JWKS keys available")
        try:
            valid = jws.validate_compact(obj, keyset, registry=self._registry)
        except (JoseError, ValueError) as exc:
            raise _Rejected(f"JWT key {_clip(kid)}: {_short(exc)}") from None
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
            raise _Rejected(f"JWT claims: {_short(exc)}") from None

        tenant = claims.get(settings.tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise _Rejected(f"JWT claim {settings.tenant_claim!r} is missing or not a string")
        if not TENANT_PATTERN.fullmatch(tenant) or tenant == LOCAL_TENANT:
            raise _Rejected(f"JWT claim {settings.tenant_claim!r} is not a tenant name")
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

    # -- JWKS by URL --

    async def _keyset_for(self, kid: str | None, settings: JwtSettings) -> KeySet | None:
        if settings.jwks_url is None:
            return self._keyset
        if self._wants_fetch(kid):
            async with self._fetch_lock:
                # Another request may have fetched while this one waited.
                if self._wants_fetch(kid):
                    await self._fetch(settings.jwks_url)
        return self._keyset

    def _wants_fetch(self, kid: str | None) -> bool:
        now = self._clock()
        if self._attempted_at is not None and now - self._attempted_at < JWKS_REFETCH_INTERVAL_S:
            return False
        if self._keyset is None or self._fetched_at is None:
            return True
        return now - self._fetched_at >= JWKS_MAX_AGE_S or not _has_kid(self._keyset, kid)

    async def _fetch(self, url: str) -> None:
        self._attempted_at = self._clock()
        try:
            async with (
                httpx.AsyncClient(
                    transport=self._transport,
                    timeout=JWKS_FETCH_TIMEOUT_S,
                    follow_redirects=False,
                ) as client,
                client.stream("GET", url, headers={"Accept": "application/json"}) as response,
            ):
                if response.status_code != 200:
                    log.warning(
                        "JWKS %s: HTTP %d; keeping the keys held", url, response.status_code
                    )
                    return
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > JWKS_MAX_BYTES:
                        log.warning("JWKS %s: larger than %d bytes; ignored", url, JWKS_MAX_BYTES)
                        return
        except httpx.HTTPError as exc:
            log.warning("JWKS %s: %s; keeping the keys held", url, _short(exc))
            return
        keys, problems = parse_jwks(bytes(body))
        for problem in problems:
            log.warning("JWKS %s: %s", url, problem)
        if not keys:
            log.warning("JWKS %s: no usable key; keeping the keys held", url)
            return
        self._keyset = KeySet(keys)
        self._fetched_at = self._attempted_at
        log.info("JWKS %s: %d key(s) loaded", url, len(keys))


def _has_kid(keyset: KeySet, kid: str | None) -> bool:
    if kid is None:
        return len(keyset.keys) == 1
    return any(key.kid == kid for key in keyset.keys)


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


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
