"""Lazy re-exports for a package's `__init__`: the names it shows, imported on first use.

Every `airlock` command imports `airlock.server`, and importing one module of a room (the
CLI's `broker.vault`) runs that room's `__init__` first; eager re-exports there would load
pydantic, sqlite3, the policy model or the MCP SDK for a command that needs none of them.
A package that re-exports lazily maps each name to the module it lives in, defines
`__getattr__` (PEP 562) as a call to `resolve`, and imports the same names under
`TYPE_CHECKING` for mypy; `from airlock.store import Database` works as before.
Imports nothing of Airlock's.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence


def homes(modules: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """`{module: names}` turned into `{name: module}`, what `resolve` looks names up in."""
    return {name: module for module, names in modules.items() for name in names}


def resolve(package: str, exported: Mapping[str, str], name: str) -> object:
    """`package.name`, imported from its module and kept in the package's namespace, so the
    next lookup is an ordinary attribute."""
    module = exported.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(f"{package}.{module}"), name)
    setattr(sys.modules[package], name, value)
    return value
