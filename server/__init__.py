"""The MCP server: registration, transports, session leases, the CLI and configuration.

The top room: may import every room (tools, sandbox, egress, broker, policies, store) and
the base modules; no room imports it. The only room that imports starlette or uvicorn
(pyproject's import contracts, checked by `lint-imports`).
"""

from .app import build_server
from .config import Config

__all__ = ["Config", "build_server"]
