"""Reading the auth config file: TOML in, a validated `AuthConfig` (with its JWKS file's
keys) out, or one `AuthConfigInvalid` listing every problem.

The steps and their wording are the ones policy files use (`airlock.config_files`).
"""

from __future__ import annotations

from pathlib import Path

from airlock.config_files import load_toml_model
from airlock.errors import AuthConfigInvalid

from .config import AuthConfig, loader_context, raw_problems


def load_auth_config(path: Path) -> AuthConfig:
    """Load and validate the auth config TOML at `path`, including its JWKS file.

    Raises `AuthConfigInvalid` naming the file and listing every problem found.
    """
    return load_toml_model(
        AuthConfig,
        str(path),
        path.read_bytes,
        AuthConfigInvalid,
        context=loader_context(path.parent),
        raw_checks=raw_problems,
    )
