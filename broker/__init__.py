"""The broker: capabilities, run tokens and the secret vault.

Grants capabilities as leases with hierarchical ids (`tenant/<t>/session/<s>/cap/<id>`),
expires and revokes them (one prefix ends a session), and enforces quotas on how many are
live; mints, verifies and revokes the opaque run tokens a sandbox presents to its egress
proxy; keeps secret values encrypted at rest, each bound to the hosts it may be sent to.
Every secret value travels as a `Secret`, which never shows it.

Policy decisions (may this capability be granted, with what scope) and the enforcement
itself (does this request match a grant, inject the header) belong to the callers: the
broker takes the policy's capability and the scope the caller resolved from it
(`policies.Scope`). All clocks are arguments (`now`); only the vault does file I/O, and
it is synchronous (call it through `anyio.to_thread`).

May import policies, store (the vault's directory is a `store.private_dir`) and the base
modules, and no room above (pyproject's import contracts, checked by `lint-imports`).

The names below are imported on first use (`airlock.lazy`), so the CLI's secret commands
do not load the policy model.
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from typing import TYPE_CHECKING

from airlock.lazy import homes, resolve

if TYPE_CHECKING:
    from .grants import ApprovedBy, Grant, Grants, Tls, grant_prefix
    from .secret import Secret
    from .tokens import RunClaims, RunTokens
    from .vault import KEY_FILE_ENV, SecretInfo, Vault, load_key, vault_path

_HOMES = homes(
    {
        "grants": ("ApprovedBy", "Grant", "Grants", "Tls", "grant_prefix"),
        "secret": ("Secret",),
        "tokens": ("RunClaims", "RunTokens"),
        "vault": ("KEY_FILE_ENV", "SecretInfo", "Vault", "load_key", "vault_path"),
    }
)

__all__ = [
    "KEY_FILE_ENV",
    "ApprovedBy",
    "Grant",
    "Grants",
    "RunClaims",
    "RunTokens",
    "Secret",
    "SecretInfo",
    "Tls",
    "Vault",
    "grant_prefix",
    "load_key",
    "vault_path",
]


def __getattr__(name: str) -> object:
    return resolve(__name__, _HOMES, name)
