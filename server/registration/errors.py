"""Airlock errors raised in a tool become the MCP SDK's tool errors here, with the
sentence tools/errors.py chooses; nothing else in the tools knows the SDK's error type."""

from __future__ import annotations

from types import TracebackType

from mcp.server.mcpserver.exceptions import ToolError

from airlock.tools import tool_error_text


class tool_errors:
    """Translate Airlock errors raised in the block; never swallows anything.

    A class rather than a generator context manager so type checkers know the block's
    exceptions always propagate (and tool functions need no unreachable returns).
    """

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        text = None if exc is None else tool_error_text(exc)
        if text is not None:
            raise ToolError(text) from exc
