"""What `airlock serve` says when a person, not an MCP client, started it in a terminal.

Over stdio the server waits silently for JSON-RPC on stdin; typed at a prompt that looks
like a hang. When stdin is a terminal, stderr gets one note saying so and the command that
registers this very executable with a client.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Sequence


def registration_hint(argv0: str, serve_args: Sequence[str]) -> str:
    """The note for a terminal: what `serve` waits for, and how to register it."""
    command = shlex.join([_executable(argv0), "serve", *serve_args])
    return (
        "airlock: serving MCP on stdin/stdout, waiting for an MCP client; typing here does "
        "nothing (Ctrl-C stops it).\n"
        "airlock: let your client start it instead, e.g. Claude Code:\n"
        f"  claude mcp add airlock -- {command}\n"
    )


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _executable(argv0: str) -> str:
    """This `airlock` as an absolute path a client can start from any directory."""
    if os.sep in argv0 and os.path.isfile(argv0):
        return os.path.abspath(argv0)
    return shutil.which(argv0) or "airlock"
