"""Tool arguments as a model must send them: unknown names refused, every error one sentence.

The SDK (mcp 2.3) builds each tool's argument model from the function signature
(`func_metadata` → a pydantic model on `ArgModelBase`), which ignores unknown keys, so
`{"code": "print(1)", "lang": "bash"}` would run Python; and it reports a bad argument as
pydantic's multi-line dump ending in a URL. `StrictToolServer` closes the model after each
registration and rewrites argument errors into one sentence built from the tool's schema.

Closing the model touches SDK internals (`MCPServer._tool_manager`, `Tool.fn_metadata.arg_model`,
`Tool.parameters`); `_close` checks their shape and fails at registration, not at a call, if
the SDK changes (hence `mcp` pinned to 2.3.*; tests/test_arguments.py watches it too).
Nothing else here touches the SDK beyond its public `add_tool` and `call_tool`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import CallToolResult, Icon, InputRequiredResult, ToolAnnotations
from pydantic import ConfigDict, ValidationError

from airlock.spelling import did_you_mean

Schema = Mapping[str, Any]


class StrictToolServer(MCPServer[Any]):
    """An `MCPServer` whose tools refuse unknown arguments and explain bad ones in a sentence.

    Tool descriptions taken from docstrings are dedented, so the model reads them without
    the source's indentation.
    """

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        super().add_tool(
            fn,
            name=name,
            title=title,
            description=description or inspect.cleandoc(fn.__doc__ or ""),
            annotations=annotations,
            icons=icons,
            meta=meta,
            structured_output=structured_output,
        )
        _close(self._tool_manager.get_tool(name or fn.__name__))

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            tool = self._tool_manager.get_tool(name)
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            if tool is None:
                raise
            raise ToolError(describe_argument_errors(name, cause, tool.parameters)) from cause


def _close(tool: Tool | None) -> None:
    """Make `tool`'s argument model forbid unknown keys, and its schema say so."""
    metadata = getattr(tool, "fn_metadata", None)
    model = getattr(metadata, "arg_model", None)
    if tool is None or not (isinstance(model, type) and issubclass(model, ArgModelBase)):
        raise RuntimeError(
            "the mcp SDK no longer builds tool arguments as Airlock expects "
            "(server/strict_tools.py); pin mcp to 2.3.* or update the adapter"
        )
    closed: type[ArgModelBase] = type(
        model.__name__,
        (model,),
        {"model_config": ConfigDict(extra="forbid"), "__module__": model.__module__},
    )
    metadata.arg_model = closed  # type: ignore[union-attr]
    tool.parameters = closed.model_json_schema(by_alias=True)


def describe_argument_errors(tool: str, error: ValidationError, schema: Schema) -> str:
    """One sentence naming every bad argument and what is allowed instead (never the values)."""
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        loc = tuple(item["loc"])
        parts.append(_describe(tool, loc, item["type"], item.get("ctx") or {}, item["msg"], schema))
    return f"Invalid arguments for {tool}: " + "; ".join(dict.fromkeys(parts)) + "."


def _describe(
    tool: str, loc: tuple[int | str, ...], kind: str, ctx: Mapping[str, Any], msg: str, root: Schema
) -> str:
    where = _where(loc)
    if kind == "extra_forbidden":
        parent = _at(root, loc[:-1])
        known = list((parent or {}).get("properties", {}))
        unknown = str(loc[-1])
        hint = did_you_mean(unknown, known)
        if len(loc) == 1:
            return f"unknown argument {unknown!r}{hint}; {tool} takes {', '.join(known)}"
        return f"{_where(loc[:-1])} has no field {unknown!r}{hint}; it takes {', '.join(known)}"
    if kind == "missing":
        return f"{where} is required"
    if kind in ("literal_error", "enum"):
        return f"{where} must be {ctx.get('expected', 'one of the listed values')}"
    if kind in _BOUNDS:
        phrase, key = _BOUNDS[kind]
        return f"{where} must be {phrase} {ctx.get(key)}"
    if kind in ("string_too_long", "too_long"):
        unit = "characters" if kind == "string_too_long" else "items"
        return f"{where} must have at most {ctx.get('max_length')} {unit}"
    if kind in ("string_too_short", "too_short"):
        unit = "characters" if kind == "string_too_short" else "items"
        return f"{where} must have at least {ctx.get('min_length')} {unit}"
    shape = _shape(_at(root, loc))
    if shape is not None:
        return f"{where} must be {shape}"
    return f"{where} is not valid ({msg[:1].lower() + msg[1:]})"


_BOUNDS = {
    "greater_than_equal": ("at least", "ge"),
    "greater_than": ("more than", "gt"),
    "less_than_equal": ("at most", "le"),
    "less_than": ("less than", "lt"),
}

_TYPES = {
    "integer": "a whole number",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def _shape(schema: Schema | None) -> str | None:
    """What a value at this schema must look like, in words."""
    if schema is None:
        return None
    if "enum" in schema:
        return " or ".join(repr(v) for v in schema["enum"])
    if "const" in schema:
        return repr(schema["const"])
    options: Sequence[Schema] = schema.get("anyOf", ())
    if options:
        words = [_shape(option) for option in options]
        return " or ".join(w for w in words if w) or None
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        return "an object with " + ", ".join(schema["properties"])
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        inner = _shape(schema["items"])
        return f"a list of {_plural(inner)}" if inner else "a list"
    return _TYPES.get(kind) if isinstance(kind, str) else None


def _plural(shape: str) -> str:
    for article in ("an ", "a "):
        if shape.startswith(article):
            rest = shape[len(article) :]
            head, _, tail = rest.partition(" ")
            return f"{head}s {tail}".rstrip()
    return shape


def _at(root: Schema, loc: tuple[int | str, ...]) -> Schema | None:
    """The sub-schema at an error location (following $ref, items and nullable unions)."""
    node: Schema | None = _resolve(root, root)
    for step in loc:
        if node is None:
            return None
        if isinstance(step, int):
            items = node.get("items")
            node = _resolve(root, items) if isinstance(items, Mapping) else None
        else:
            node = _resolve(root, node.get("properties", {}).get(step))
    return node


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


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for step in loc:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text or "the arguments"
