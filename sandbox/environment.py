"""The environment of the user's code inside a sandbox.

Built from an empty dict, never from the server's own environment: nothing of
the host (tokens, paths, cloud credentials) may leak in by default.
"""

from __future__ import annotations

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def sandbox_environment() -> dict[str, str]:
    """The complete environment of a run without egress."""
    return {
        "PATH": SANDBOX_PATH,
        "HOME": "/workspace",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
