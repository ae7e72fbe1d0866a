"""The MCP server: registration, transports, session leases, the CLI and configuration.

The top room: may import every room (tools, sandbox, egress, broker, policies, store) and
the base modules; no room imports it. The only room that imports starlette or uvicorn
(pyproject's import contracts, checked by `lint-imports`).

`build_server` is imported on first use: every `airlock` command imports this package,
and only the ones that serve or drill need the MCP SDK it brings.
"""

from __future__ import annotations

from airlock.rooms import only_as_airlock

only_as_airlock(__name__)

from typing import TYPE_CHECKING, Any

from .config import Config

if TYPE_CHECKING:
    from .app import build_server

__all__ = ["Config", "build_server"]


def __getattr__(name: str) -> Any:
    if name == "build_server":
        from .app import build_server

        return build_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
