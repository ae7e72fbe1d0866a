"""The policies a command applies for a tenant: the server's, and the tenant's own from the
auth file, for the operator's commands that take `--tenant T --auth FILE` (`airlock drill`,
`airlock policy usage`). Only a `--tenant` reads the auth file, whose JWKS support loads
joserfc and httpx."""

from __future__ import annotations

from pathlib import Path

from airlock.errors import InvalidRequest
from airlock.policies import Policy, load_policy

from .config import ENV_AUTH, Config


def server_policy_label(config: Config) -> str:
    """Words naming the server's policy, for a report."""
    return f"the server policy ({config.policy_path or 'built-in default'})"


def target_policies(
    config: Config, tenant: str | None, auth: Path | None
) -> tuple[Policy, Policy | None, str]:
    """The server policy, the tenant's own policy (None: it uses the server's) and words
    naming what applies."""
    policy = load_policy(config.policy_path)
    target = server_policy_label(config)
    if tenant is None:
        return policy, None, target
    if auth is None:
        raise InvalidRequest(
            f"--tenant {tenant} needs the auth file that names its policy: pass --auth FILE "
            f"or set {ENV_AUTH}"
        )
    from .auth import load_auth_config  # JWKS support (joserfc, httpx): only for a tenant

    path = load_auth_config(auth).policy_for(tenant)
    if path is None:
        return policy, None, f"tenant {tenant} (no policy of its own: the server policy)"
    return policy, load_policy(path), f"tenant {tenant} ({path})"
