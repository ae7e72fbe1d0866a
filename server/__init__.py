"""The MCP server: registration, transports, session leases, the CLI and configuration."""

from .app import build_server
from .config import Config

__all__ = ["Config", "build_server"]
