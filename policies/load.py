"""Reading a policy file into a `Policy`, and the JSON Schema of policy files.

Every way a file can be wrong (unreadable, not UTF-8, bad TOML, failed validation)
ends in one `PolicyInvalid` that lists all of its problems; there is no fallback
to defaults. What the settings mean is `policies.model`.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from airlock.errors import PolicyInvalid
from airlock.spelling import did_you_mean
from airlock.validation import known_keys, predicate
from policies.model import Policy

_DEFAULT_SOURCE = "policies/default.toml (packaged default)"
_UNKNOWN_KEY = "unknown key; remove it or check its spelling"


def load_policy(path: Path | None) -> Policy:
    """Load and validate the policy at `path`; None loads the packaged default.

    Raises `PolicyInvalid` naming the file and listing every problem found.
    """
    if path is None:
        source = _DEFAULT_SOURCE
        reader = default_policy_toml
    else:
        source = str(path)
        reader = path.read_bytes
    try:
        raw = reader()
    except OSError as exc:
        raise PolicyInvalid(source, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    return _parse(source, raw)


def default_policy_toml() -> bytes:
    """The packaged default policy file, every setting shown and commented."""
    return resources.files("policies").joinpath("default.toml").read_bytes()


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of policy files, for editors and `airlock policy schema`."""
    return Policy.model_json_schema()


def _parse(source: str, raw: bytes) -> Policy:
    try:
        # TOML is UTF-8 by definition; tomllib only accepts str.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyInvalid(source, [f"not UTF-8 text: {exc.reason} at byte {exc.start}"]) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyInvalid(source, [f"not valid TOML: {exc}"]) from exc
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        schema = policy_json_schema()
        problems = [
            f"{_dotted(error['loc']) or '(top level)'}: {reason}"
            for error in exc.errors()
            for reason in error.get("ctx", {}).get("reasons") or [_reason(error, schema)]
        ]
        raise PolicyInvalid(source, problems) from exc


def describe_problem(error: ErrorDetails, schema: Mapping[str, Any] | None = None) -> str:
    """One pydantic error as "dotted.key: message", the form every config problem takes;
    with the file's JSON Schema, an unknown key gets the nearest known one suggested."""
    return f"{_dotted(error['loc']) or '(top level)'}: {_reason(error, schema or {})}"


def _reason(error: ErrorDetails, schema: Mapping[str, Any]) -> str:
    if error["type"] == "missing":
        return "required but missing"
    if error["type"] != "extra_forbidden":
        return predicate(error, schema, object_word="a table")
    loc = tuple(error["loc"])
    known = known_keys(schema, loc[:-1])
    hint = did_you_mean(str(loc[-1]), known)
    if hint:
        return f"unknown key{hint}"
    if known:
        return f"{_UNKNOWN_KEY} (the keys here are {', '.join(known)})"
    return _UNKNOWN_KEY


def _dotted(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path
