"""Capabilities whose secret the vault does not hold: said by `policy check`, `doctor` and
at server start, each time with the command that stores it.

A warning, never a refusal: the secret may be stored after the policy is written, and a
grant of such a capability fails on its own with a clear error. Reads the vault without
creating anything (no key is generated for a vault that does not exist).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from airlock.broker import Vault, load_key, vault_path
from airlock.errors import AirlockError
from airlock.policies import Policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MissingSecret:
    """A capability naming a secret the vault lacks, and the command that stores it."""

    capability: str
    secret: str
    hosts: tuple[str, ...]
    data_dir: Path

    @property
    def command(self) -> str:
        return f"airlock secrets set {self.secret} --hosts {','.join(self.hosts)}"

    def __str__(self) -> str:
        return (
            f"capability {self.capability!r} injects the secret {self.secret!r}, which the "
            f"vault in {self.data_dir} does not hold; store it with `{self.command}` "
            "(the value is read from stdin)"
        )


def missing_secrets(
    policy: Policy, data_dir: Path, env: Mapping[str, str], vault: Vault | None = None
) -> list[MissingSecret]:
    """Every capability whose `secret` is not in `vault` (the server's), or else in the
    vault file of `data_dir`.

    Raises `VaultError` when the vault exists but cannot be read with its key.
    """
    wanted = {name: cap for name, cap in policy.capabilities.items() if cap.secret is not None}
    if not wanted:
        return []
    path = vault_path(data_dir)
    stored: set[str] = set()
    if vault is not None:
        stored = {info.name for info in vault.list()}
    elif path.exists():
        stored = {info.name for info in Vault(path, load_key(data_dir, env)).list()}
    return [
        MissingSecret(name, cap.secret, cap.hosts, data_dir)
        for name, cap in wanted.items()
        if cap.secret is not None and cap.secret not in stored
    ]


def warn_missing_secrets(
    policies: Iterable[Policy], data_dir: Path, env: Mapping[str, str], vault: Vault
) -> None:
    """Log a warning per missing secret of any of `policies` in the server's `vault` (at
    server start)."""
    try:
        gaps = {
            str(gap) for policy in policies for gap in missing_secrets(policy, data_dir, env, vault)
        }
    except AirlockError as exc:
        log.warning("cannot check that the vault holds the capabilities' secrets: %s", exc)
        return
    for gap in sorted(gaps):
        log.warning("%s", gap)
