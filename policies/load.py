"""Reading a policy file into a `Policy`, and the JSON Schema of policy files.

Every way a file can be wrong (unreadable, not UTF-8, bad TOML, failed validation)
ends in one `PolicyInvalid` that lists all of its problems; there is no fallback
to defaults. What the settings mean is `policies.model`.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from airlock.config_files import load_toml_model
from airlock.errors import PolicyInvalid
from airlock.policies.model.policy import Policy

_DEFAULT_SOURCE = "policies/default.toml (packaged default)"


def load_policy(path: Path | None) -> Policy:
    """Load and validate the policy at `path`; None loads the packaged default.

    Raises `PolicyInvalid` naming the file and listing every problem found.
    """
    if path is None:
        return load_toml_model(Policy, _DEFAULT_SOURCE, default_policy_toml, PolicyInvalid)
    return load_toml_model(Policy, str(path), path.read_bytes, PolicyInvalid)


def default_policy_toml() -> bytes:
    """The packaged default policy file, every setting shown and commented."""
    return resources.files("airlock.policies").joinpath("default.toml").read_bytes()


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of policy files, for editors and `airlock policy schema`."""
    return Policy.model_json_schema()
