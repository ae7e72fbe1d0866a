"""Pydantic validation errors in plain words, located with the JSON Schema the reader sees.

Shared by tool arguments (read by a model) and policy files (read by an operator): each
error becomes a short predicate for its location ("must be at least 1", "is required",
"must be 'python' or 'bash'"), never pydantic's own phrasing, input values or URLs.
How a location is written and what surrounds the predicate is the caller's business.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from pydantic_core import ErrorDetails
from pydantic_core.core_schema import ErrorType

Schema = Mapping[str, Any]
Loc = tuple[int | str, ...]

_BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("more than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
}


def predicate(error: ErrorDetails, root: Schema, *, object_word: str = "an object") -> str:
    """What is wrong with the value at `error["loc"]`, as the rest of a sentence about it."""
    kind = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    if kind == "missing":
        return "is required"
    if kind in ("literal_error", "enum"):
        return f"must be {ctx.get('expected', 'one of the listed values')}"
    if kind in _BOUNDS:
        phrase, key = _BOUNDS[kind]
        bound = ctx.get(key)
        # "more than 0" for a count reads better as "at least 1".
        if kind == "greater_than" and isinstance(bound, int):
            return f"must be at least {bound + 1}"
        if kind == "less_than" and isinstance(bound, int):
            return f"must be at most {bound - 1}"
        return f"must be {phrase} {bound}"
    if kind in ("string_too_long", "too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"must have at most {ctx.get('max_length')} {unit}"
    if kind == "finite_number":
        return "must be a finite number"
    if kind in ("string_too_short", "too_short"):
        if ctx.get("min_length") == 1:
            return "must not be empty"
        unit = "characters" if kind == "string_too_short" else "items"
        return f"must have at least {ctx.get('min_length')} {unit}"
    if kind == "value_error" or kind not in PYDANTIC_ERROR_TYPES:
        # A validator's own message already says what to write instead.
        return error["msg"].removeprefix("Value error, ")
    words = shape(schema_at(root, tuple(error["loc"])), object_word=object_word)
    if words is not None:
        return f"must be {words}"
    message = error["msg"]
    return f"is not valid ({message[:1].lower() + message[1:]})"


PYDANTIC_ERROR_TYPES = frozenset(get_args(ErrorType))
"""Error types pydantic itself raises; any other type is a validator's own, with its own words."""

_TYPES = {
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "null": "null",
}


def shape(node: Schema | None, *, object_word: str = "an object") -> str | None:
    """What a value described by `node` must look like, in words."""
    if node is None:
        return None
    if "enum" in node:
        return " or ".join(repr(v) for v in node["enum"])
    if "const" in node:
        return repr(node["const"])
    options: Sequence[Schema] = node.get("anyOf", ())
    if options:
        words = [shape(option, object_word=object_word) for option in options]
        return " or ".join(w for w in words if w) or None
    kind = node.get("type")
    if kind == "object":
        if "properties" in node:
            return f"{object_word} with " + ", ".join(node["properties"])
        return object_word
    if kind == "array" and isinstance(node.get("items"), Mapping):
        inner = shape(node["items"], object_word=object_word)
        return f"a list of {_plural(inner)}" if inner else "a list"
    return _TYPES.get(kind) if isinstance(kind, str) else None


def known_keys(root: Schema, loc: Loc) -> list[str]:
    """The keys the object at `loc` may have, in schema order."""
    node = schema_at(root, loc)
    return list((node or {}).get("properties", {}))


def schema_at(root: Schema, loc: Loc) -> Schema | None:
    """The sub-schema at a location (following $ref, items, tables of one kind, nullables)."""
    node: Schema | None = _resolve(root, root)
    for step in loc:
        if node is None:
            return None
        if isinstance(step, int):
            items = node.get("items")
            node = _resolve(root, items) if isinstance(items, Mapping) else None
        elif step in node.get("properties", {}):
            node = _resolve(root, node["properties"][step])
        else:
            node = _resolve(root, _table_of_one_kind(node, step))
    return node


def _table_of_one_kind(node: Schema, key: str) -> Any:
    """The schema of `key` in a table whose keys are free names (`dict[str, Model]`)."""
    for pattern, value in node.get("patternProperties", {}).items():
        if re.search(pattern, key):
            return value
    return node.get("additionalProperties")


def _resolve(root: Schema, node: Any) -> Schema | None:
    if not isinstance(node, Mapping):
        return None
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolve(root, root.get("$defs", {}).get(ref.removeprefix("#/$defs/")))
    options = [o for o in node.get("anyOf", ()) if isinstance(o, Mapping)]
    concrete = [o for o in options if o.get("type") != "null"]
    if len(concrete) == 1 and len(options) == 2:
        return _resolve(root, concrete[0])
    return node


def _plural(words: str) -> str:
    for article in ("an ", "a "):
        if words.startswith(article):
            head, _, tail = words[len(article) :].partition(" ")
            return f"{head}s {tail}".rstrip()
    return words
