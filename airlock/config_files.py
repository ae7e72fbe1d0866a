"""Reading an operator's TOML file into a pydantic model, listing every problem at once.

Shared by policy files (`policies.load`) and the auth config (`server.auth.load`): the
same steps (read, UTF-8, TOML, validate) fail with the same words, and every problem is
one line "dotted.key: what is wrong". What the files mean, and which error names them,
is the caller's business.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from airlock.errors import ConfigFileInvalid
from airlock.spelling import did_you_mean
from airlock.validation import known_keys, predicate

Model = TypeVar("Model", bound=BaseModel)
Invalid = type[ConfigFileInvalid]
"""The caller's error for its kind of file (`PolicyInvalid`, `AuthConfigInvalid`)."""

_UNKNOWN_KEY = "unknown key; remove it or check its spelling"


def load_toml_model(
    model: type[Model],
    source: str,
    read: Callable[[], bytes],
    invalid: Invalid,
    *,
    context: Mapping[str, Any] | None = None,
    raw_checks: Callable[[dict[str, Any]], list[str]] | None = None,
) -> Model:
    """Read `source` with `read`, parse it as TOML and validate it as `model`.

    `raw_checks` are checks on the parsed data that must be listed even when some field
    fails validation (pydantic then skips the model's own validators); their problems
    follow the field problems. Raises `invalid(source, problems)` listing every problem.
    """
    data = _read_toml(source, read, invalid)
    problems: list[str] = []
    result: Model | None = None
    try:
        result = model.model_validate(data, context=context)
    except ValidationError as exc:
        problems += validation_problems(exc, model.model_json_schema())
    if raw_checks is not None:
        problems += raw_checks(data)
    if problems or result is None:
        raise invalid(source, problems or ["invalid"])
    return result


def _read_toml(source: str, read: Callable[[], bytes], invalid: Invalid) -> dict[str, Any]:
    try:
        raw = read()
    except OSError as exc:
        raise invalid(source, [f"cannot read the file: {exc.strerror or exc}"]) from exc
    try:
        # TOML is UTF-8 by definition; tomllib only accepts str.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(source, [f"not UTF-8 text: {exc.reason} at byte {exc.start}"]) from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise invalid(source, [f"not valid TOML: {exc}"]) from exc


def validation_problems(exc: ValidationError, schema: Mapping[str, Any]) -> list[str]:
    """Every error of `exc` as a "dotted.key: message" line.

    A validator that found several problems at once puts them in its error's
    `ctx["reasons"]`; each becomes its own line at that location, or at the field a model
    validator names in `ctx["field"]`.
    """
    problems: list[str] = []
    for error in exc.errors():
        ctx = error.get("ctx") or {}
        loc = (*error["loc"], ctx["field"]) if "field" in ctx else tuple(error["loc"])
        where = _dotted(loc) or "(top level)"
        reasons = ctx.get("reasons") or [_reason(error, schema)]
        problems += [f"{where}: {reason}" for reason in reasons]
    return problems


def describe_problem(error: ErrorDetails, schema: Mapping[str, Any] | None = None) -> str:
    """One pydantic error as "dotted.key: message", the form every config problem takes;
    with the file's JSON Schema, an unknown key gets the nearest known one suggested."""
    return f"{_dotted(tuple(error['loc'])) or '(top level)'}: {_reason(error, schema or {})}"


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
