"""Shared base of every room: the version, and beside it the base modules (the one error
hierarchy `errors`, `characters`, `ids`, `languages`, `spelling`, `validation`,
`config_files`).

The base sits below every room, so every room may import it; no base module imports a
room, and this file imports nothing of ours (pyproject's `rooms` and `root` import
contracts, checked by `lint-imports`).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("airlock-mcp")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
