"""Package `__init__`s that re-export lazily (`airlock.lazy`) show every name they list,
the very object of the module it lives in, and refuse a name they do not have."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from airlock import lazy

LAZY_PACKAGES = (
    "airlock.store",
    "airlock.broker",
    "airlock.server.auth",
    "airlock.tools",
    "airlock.sandbox",
)


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_every_listed_name_is_the_object_of_its_module(name: str) -> None:
    package = importlib.import_module(name)
    table = package._HOMES
    assert sorted(table) == sorted(package.__all__)
    for export, module in table.items():
        home = importlib.import_module(f"{name}.{module}")
        assert getattr(package, export) is getattr(home, export), export


@pytest.mark.parametrize("name", [*LAZY_PACKAGES, "airlock.server", "airlock"])
def test_an_unknown_name_is_an_attribute_error(name: str) -> None:
    package = importlib.import_module(name)
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'nonesuch'"):
        _ = package.nonesuch


def test_a_name_is_imported_on_first_use_and_kept() -> None:
    # A fresh interpreter: this one imported the store's modules long ago.
    script = (
        "import sys, airlock.store as s\n"
        "assert 'airlock.store.database' not in sys.modules\n"
        "db = s.Database\n"
        "assert 'airlock.store.database' in sys.modules and vars(s)['Database'] is db\n"
        "from airlock.server import build_server\n"
        "import airlock\n"
        "assert airlock.__version__ == vars(airlock)['__version__']\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


def test_resolve_names_the_package_it_lacks() -> None:
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'x'"):
        lazy.resolve("pkg", lazy.homes({"m": ("y",)}), "x")
