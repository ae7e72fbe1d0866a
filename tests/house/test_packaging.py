"""The package declares every distribution its product code imports."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from support import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# The rooms live at the top of the repository and are linked under airlock/, so they install as
# airlock.<room> (issue: top-level `server`, `tools`... collided with other projects).
ROOMS = sorted(p.name for p in (ROOT / "airlock").iterdir() if p.is_symlink())


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _imported_modules() -> dict[str, str]:
    """Top-level module -> one file importing it, over every product module."""
    found: dict[str, str] = {}
    for room in ("airlock", *ROOMS):
        for path in sorted((ROOT / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_a_declared_dependency() -> None:
    declared = {
        _normalized(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])
        for requirement in PYPROJECT["project"]["dependencies"]
    }
    owners = packages_distributions()
    undeclared = {}
    for module, where in _imported_modules().items():
        if module in sys.stdlib_module_names or module in ("airlock", "__future__"):
            continue
        distributions = {_normalized(d) for d in owners.get(module, [module])}
        if not distributions & declared:
            undeclared[module] = (where, sorted(distributions))
    assert undeclared == {}


def test_the_scan_sees_the_imports_it_must_check() -> None:
    modules = _imported_modules()
    for module in ("requests", "starlette", "tomli_w", "mcp", "pydantic_core"):
        assert module in modules


def test_the_rooms_install_under_the_airlock_namespace_only() -> None:
    assert ROOMS == ["broker", "egress", "policies", "sandbox", "server", "store", "tools"]
    for room in ROOMS:
        assert (ROOT / "airlock" / room).resolve() == ROOT / room
        module = importlib.import_module(f"airlock.{room}")
        assert Path(module.__file__ or "").resolve().parent == ROOT / room
        assert importlib.util.find_spec(room) is None, f"a top-level {room!r} is importable"
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == [
        "airlock",
        "airlock.*",
    ]
    assert PYPROJECT["project"]["scripts"]["airlock"] == "airlock.server.cli:main"
