"""The import contracts in pyproject.toml hold for the product and refuse what they forbid.

The README's test command runs `lint-imports`; these tests run it as well, on the product
and on a copy of its sources with one forbidden import added, so each contract is seen to
fail on exactly the import it forbids.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support import ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
ROOMS = sorted(p.name for p in (ROOT / "airlock").iterdir() if p.is_symlink())
_CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CONTRACTS = {c["id"]: c["name"] for c in _CONFIG["tool"]["importlinter"]["contracts"]}


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH comes before the editable install's finder, so `airlock` is the tree's.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _sources_only(directory: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".py") and not (Path(directory) / n).is_dir()] + [
        "__pycache__"
    ]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the product's Python sources, linked as the repository links them."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "airlock", tmp_path / "airlock", symlinks=True, ignore=_sources_only)
    for room in ROOMS:
        shutil.copytree(ROOT / room, tmp_path / room, ignore=_sources_only)
    return tmp_path


def test_the_product_keeps_every_import_contract() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 broken." in result.stdout


def test_an_unchanged_copy_keeps_every_contract(tree: Path) -> None:
    # The copy is complete: a failure below comes from the one import each case adds.
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 broken." in result.stdout


VIOLATIONS = [
    # (file in the copy, line appended, contract broken, import named in the report)
    ("store/upward.py", "from airlock.tools import envelope", "rooms", "airlock.store.upward"),
    ("broker/upward.py", "import airlock.egress", "rooms", "airlock.broker.upward"),
    ("policies/sideways.py", "import airlock.store", "rooms", "airlock.policies.sideways"),
    ("airlock/ids.py", "import airlock.store", "rooms", "airlock.ids -> airlock.store"),
    ("airlock/unplaced.py", "", "rooms", "airlock.unplaced"),
    ("airlock/__init__.py", "from airlock import errors", "root", "airlock -> airlock.errors"),
    ("server/upward.py", "import docker", "docker", "airlock.server.upward -> docker"),
    ("egress/upward.py", "import mcp", "mcp", "airlock.egress.upward -> mcp"),
    ("tools/upward.py", "import starlette", "transports", "airlock.tools.upward -> starlette"),
]


@pytest.mark.parametrize(("path", "line", "contract", "named"), VIOLATIONS)
def test_a_forbidden_import_breaks_its_contract(
    tree: Path, path: str, line: str, contract: str, named: str
) -> None:
    target = tree / path
    before = target.read_text(encoding="utf-8") if target.exists() else ""
    target.write_text(f"{before}\n{line}\n", encoding="utf-8")
    result = _lint(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    assert ", 1 broken." in result.stdout, result.stdout
    assert _broken(result.stdout) == [CONTRACTS[contract]], result.stdout
    assert named in result.stdout, result.stdout


def _broken(report: str) -> list[str]:
    """The names of the contracts the report's summary calls broken."""
    # The terminal width wraps long names: compare with whitespace collapsed.
    summary = " ".join(report.split("Contracts\n---------", 1)[1].split())
    return [name for name in CONTRACTS.values() if f"{' '.join(name.split())} BROKEN" in summary]
