"""Shared base of every room: the version, and beside it the base modules (the one error
hierarchy `errors`, `characters`, `ids`, `languages`, `spelling`, `validation`,
`config_files`, `lazy`, and `rooms`, which makes each room answer only to `airlock.<room>`).

The base sits below every room, so every room may import it; no base module imports a
room, and this file imports nothing of ours (pyproject's `rooms` and `root` import
contracts, checked by `lint-imports`).

`__version__` is read from the installed metadata on first use (`importlib.metadata` costs
more than the rest of a light `airlock` command).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    __version__: str


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("airlock-mcp")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0"
    globals()["__version__"] = found
    return found
