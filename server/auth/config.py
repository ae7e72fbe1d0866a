"""The auth config file's model: API key entries, the JWT issuer, and checks across them.

Belongs here: what each setting means and the rules a valid file follows, stated once and
run once per load (`server.auth.load` runs the checks across entries on the raw file, so
they are listed next to field problems; a config built in code runs them in its
validators). Not here: reading the TOML file (`server.auth.load`), checking a token
(`server.auth.verify`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from ipaddress import ip_address
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from joserfc.jwk import Key
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ..config import LOCAL_TENANT, RESERVED_TENANT_PREFIX
from .jwks import SUPPORTED_ALGORITHMS, read_jwks_file

TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
KEY_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")

_CROSS_ENTRY = "airlock_cross_entry"
#: Set in the validation context by the loader, which runs the checks across entries itself.
_LOADER_CHECKED = "airlock_loader_checked"
_TENANT_RULE = "use 1-63 lowercase letters, digits and '-', starting with a letter or digit"


def loader_context(base_dir: Path) -> dict[str, Any]:
    """The validation context of a file in `base_dir` whose raw data `raw_problems` checked."""
    return {"base_dir": base_dir, _LOADER_CHECKED: True}


def raw_problems(data: Mapping[str, Any]) -> list[str]:
    """The checks across entries and tables, on a file's raw data: tolerant of malformed
    entries, so they are listed even when some entry fails field validation (pydantic then
    skips model validators)."""
    keys = data.get("keys", [])
    jwt = data.get("jwt")
    problems = _cross_entry_problems(keys if isinstance(keys, list) else [], jwt is not None)
    if isinstance(jwt, Mapping):
        problem = _jwks_source_problem(jwt.get("jwks_file"), jwt.get("jwks_url"))
        if problem:
            problems.append(problem)
    return problems


def _loader_checked(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get(_LOADER_CHECKED))


def tenant_name_problem(value: str) -> str | None:
    """Why `value` cannot name a tenant (in words that do not repeat it), or None."""
    if not TENANT_PATTERN.fullmatch(value):
        return _TENANT_RULE
    if value == LOCAL_TENANT:
        return f"'{LOCAL_TENANT}' is reserved for the local stdio user; choose another name"
    if value.startswith(RESERVED_TENANT_PREFIX):
        return (
            f"names starting with '{RESERVED_TENANT_PREFIX}' are reserved for Airlock's own "
            "calls (`airlock drill` runs as 'airlock-drill', which `airlock policy usage` "
            "leaves out); choose another name"
        )
    return None


def _check_tenant(value: str) -> str:
    problem = tenant_name_problem(value)
    if problem is not None:
        raise PydanticCustomError("tenant_name", f"{value!r} is not a tenant name: {problem}")
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

    _jwks_keys: tuple[Key, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _read_jwks_file(self, info: ValidationInfo) -> JwtSettings:
        if not _loader_checked(info):
            problem = _jwks_source_problem(self.jwks_file, self.jwks_url)
            if problem:
                raise PydanticCustomError(_CROSS_ENTRY, problem)
        if self.jwks_file is not None and self.jwks_url is None:
            keys, problems = read_jwks_file(self.jwks_file)
            if problems or not keys:
                problems = problems or ["no usable key"]
                raise PydanticCustomError(
                    "jwks_file",
                    "jwks_file: {reason}",
                    {"reason": "; ".join(problems), "reasons": problems, "field": "jwks_file"},
                )
            self._jwks_keys = tuple(keys)
        return self

    @property
    def jwks_keys(self) -> tuple[Key, ...]:
        """The usable keys of `jwks_file`, read once when these settings were validated;
        empty with `jwks_url`, whose keys are fetched when a token needs them."""
        return self._jwks_keys


class AuthConfig(BaseModel):
    """The auth config file: who may call the HTTP server and as which tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: tuple[ApiKeyEntry, ...] = ()
    """Static API keys; empty means none are accepted."""
    jwt: JwtSettings | None = None
    """JWT issuer; missing means JWTs are not accepted. At least one of the two is needed."""

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> AuthConfig:
        if _loader_checked(info):
            return self
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
