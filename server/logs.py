"""Logging for the CLI: everything to stderr, never stdout (stdout is the MCP wire)."""

from __future__ import annotations

import logging
import sys


def setup_logging(verbose: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("airlock: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # The SDK and HTTP clients are chatty at INFO; keep their warnings only.
    for noisy in ("mcp", "httpx", "docker", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
