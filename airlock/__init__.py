"""Shared leaf of every room: the version, the one error hierarchy, name suggestions.

Nothing here imports any other Airlock package, so every room may import it.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("airlock-mcp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
