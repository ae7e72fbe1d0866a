"""Tool arguments as a model must send them: unknown names refused, every error one sentence.

The SDK (mcp 2.x) builds each tool's argument model from the function signature
(`func_metadata` → a pydantic model on `ArgModelBase`), which ignores unknown keys, so
`{"code": "print(1)", "lang": "bash"}` would run Python; and it reports a bad argument as
pydantic's multi-line dump ending in a URL. `StrictToolServer` closes the model after each
registration and rewrites argument errors into one sentence built from the tool's schema.

This is the one adapter over the SDK's tool registration, and the one module that touches
its internals: `MCPServer._tool_manager`, `Tool.fn_metadata.arg_model`, `Tool.parameters`,
the tools/list handler `_handle_list_tools` (bound by the SDK at construction), which a
server whose session rule depends on the caller's protocol era overrides to say that era's
rule, the tools/call handler `_handle_call_tool`, which the Tasks extension retries a
call that waited on its client with (`call_tool_handler`), and the low-level server
`_lowlevel_server`, whose subscriptions/listen the Tasks extension serves (`serve_listen`).
`sdk_shape_problem` checks all of them: a server refuses to be built (and
tests/rooms/server/test_arguments.py fails by name) when a new SDK moves one, instead of
quietly accepting unknown arguments. So `mcp`
follows 2.x rather than one minor release.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    Icon,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    ToolAnnotations,
)
from mcp.types import Tool as MCPTool
from pydantic import ConfigDict, ValidationError

from airlock.spelling import did_you_mean
from airlock.validation import Loc, Schema, known_keys, predicate

SDK_CHANGED = (
    "the mcp SDK no longer registers tools as Airlock expects ({problem}; "
    "server/strict_tools.py): install an mcp release the adapter knows or update the adapter"
)

SessionSentence = Callable[[str, str | None], str]
"""The description of a tool's `session_id` argument for (tool name, protocol version)."""


class StrictToolServer(MCPServer[Any]):
    """An `MCPServer` whose tools refuse unknown arguments and explain bad ones in a sentence.

    Tool descriptions taken from docstrings are dedented, so the model reads them without
    the source's indentation. With `session_sentence`, each tool's `session_id` argument is
    described in tools/list for the caller's protocol era.
    """

    def __init__(
        self, *args: Any, session_sentence: SessionSentence | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        problem = sdk_shape_problem(self)
        if problem is not None:
            raise RuntimeError(SDK_CHANGED.format(problem=problem))
        self._session_sentence = session_sentence

    async def _handle_list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        listed = await super()._handle_list_tools(ctx, params)
        sentence = self._session_sentence
        if sentence is None:
            return listed
        tools = [
            _with_session_sentence(tool, sentence(tool.name, ctx.protocol_version))
            for tool in listed.tools
        ]
        return listed.model_copy(update={"tools": tools})

    @property
    def call_tool_handler(
        self,
    ) -> Callable[[ServerRequestContext[Any, Any], CallToolRequestParams], Awaitable[Any]]:
        """The SDK's tools/call handler (`MCPServer._handle_call_tool`), beneath the
        extensions' interceptor: what the Tasks extension retries a waiting call with."""
        return self._handle_call_tool

    def serve_listen(
        self,
        handler: Callable[
            [ServerRequestContext[Any, Any], SubscriptionsListenRequestParams],
            Awaitable[SubscriptionsListenResult],
        ],
    ) -> None:
        """Serve subscriptions/listen with `handler` instead of the SDK's own (the Tasks
        extension's `taskIds` ride it, which the SDK's drops), on the SDK's low-level
        server (`MCPServer._lowlevel_server`), which an extension may not bind it on."""
        self._lowlevel_server.add_request_handler(
            "subscriptions/listen", SubscriptionsListenRequestParams, handler
        )

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
            # Only the SDK's own argument check raises a ToolError straight from a
            # ValidationError; a tool's deliberate errors arrive with their own cause.
            cause = exc.__cause__
            tool = self._tool_manager.get_tool(name)
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            assert tool is not None  # it just validated this call's arguments
            raise ToolError(describe_argument_errors(name, cause, tool.parameters)) from cause


def _with_session_sentence(tool: MCPTool, description: str) -> MCPTool:
    """`tool` with its session_id argument described as given (a copy: the SDK keeps one
    schema per tool for every caller)."""
    properties = tool.input_schema.get("properties", {})
    if "session_id" not in properties:
        return tool
    argument = {**properties["session_id"], "description": description}
    schema = {**tool.input_schema, "properties": {**properties, "session_id": argument}}
    return tool.model_copy(update={"input_schema": schema})


def sdk_shape_problem(server: MCPServer[Any]) -> str | None:
    """What of the SDK's internals this adapter relies on is missing on `server`, if any."""
    manager = getattr(server, "_tool_manager", None)
    if not callable(getattr(manager, "get_tool", None)):
        return "MCPServer._tool_manager.get_tool is gone"
    handler = getattr(MCPServer, "_handle_list_tools", None)
    if not inspect.iscoroutinefunction(handler):
        return "MCPServer._handle_list_tools is gone"
    if list(inspect.signature(handler).parameters) != ["self", "ctx", "params"]:
        return "MCPServer._handle_list_tools takes other arguments"
    call = getattr(MCPServer, "_handle_call_tool", None)
    if not inspect.iscoroutinefunction(call):
        return "MCPServer._handle_call_tool is gone"
    if list(inspect.signature(call).parameters) != ["self", "ctx", "params"]:
        return "MCPServer._handle_call_tool takes other arguments"
    lowlevel = getattr(server, "_lowlevel_server", None)
    if not callable(getattr(lowlevel, "add_request_handler", None)):
        return "MCPServer._lowlevel_server.add_request_handler is gone"
    fields = getattr(Tool, "model_fields", {})
    if "fn_metadata" not in fields or "parameters" not in fields:
        return "a registered Tool has no fn_metadata or parameters"
    return None


def _close(tool: Tool | None) -> None:
    """Make `tool`'s argument model forbid unknown keys, and its schema say so."""
    metadata = getattr(tool, "fn_metadata", None)
    model = getattr(metadata, "arg_model", None)
    if tool is None or not (isinstance(model, type) and issubclass(model, ArgModelBase)):
        raise RuntimeError(SDK_CHANGED.format(problem="a tool's arguments are no ArgModelBase"))
    closed: type[ArgModelBase] = type(
        model.__name__,
        (model,),
        {"model_config": ConfigDict(extra="forbid"), "__module__": model.__module__},
    )
    metadata.arg_model = closed  # type: ignore[union-attr]
    tool.parameters = without_titles(closed.model_json_schema(by_alias=True))
    output = metadata.output_schema  # type: ignore[union-attr]
    if output is not None:
        # Published only; the SDK validates results against the output model, not this.
        metadata.output_schema = without_titles(output)  # type: ignore[union-attr]


def without_titles(schema: Schema) -> dict[str, Any]:
    """`schema` without pydantic's generated titles ("Run Id" for run_id, …): every model
    reading tools/list pays for them on every turn and learns nothing from them."""
    return {key: _untitled(key, value) for key, value in schema.items() if key != "title"}


def _untitled(key: str, value: Any) -> Any:
    if key in ("properties", "$defs") and isinstance(value, dict):
        return {name: without_titles(sub) for name, sub in value.items()}
    if isinstance(value, dict):
        return without_titles(value)
    if isinstance(value, list):
        return [without_titles(item) if isinstance(item, dict) else item for item in value]
    return value


def describe_argument_errors(tool: str, error: ValidationError, schema: Schema) -> str:
    """One sentence naming every bad argument and what is allowed instead (never the values)."""
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        loc = tuple(item["loc"])
        if item["type"] == "extra_forbidden":
            known = known_keys(schema, loc[:-1])
            unknown = str(loc[-1])
            hint = did_you_mean(unknown, known)
            if len(loc) == 1:
                parts.append(f"unknown argument {unknown!r}{hint}; {tool} takes {', '.join(known)}")
            else:
                where = _where(loc[:-1])
                parts.append(f"{where} has no field {unknown!r}{hint}; it takes {', '.join(known)}")
        else:
            parts.append(f"{_where(loc)} {predicate(item, schema)}")
    return f"Invalid arguments for {tool}: " + "; ".join(dict.fromkeys(parts)) + "."


def _where(loc: Loc) -> str:
    text = ""
    for step in loc:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else str(step))
    return text or "the arguments"
