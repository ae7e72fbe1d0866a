"""The import contracts in pyproject.toml hold for the product and refuse what they forbid;
each room imports only as `airlock.<room>`, and each of its files is type-checked once.

The README's test command runs `lint-imports`; these tests run it as well, on the product
and on a copy of its sources with one forbidden import added, so each contract is seen to
fail on exactly the import it forbids. Why the rooms are links under airlock/ at all:
docs/layout.md.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support import ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
MYPY = str(Path(sys.executable).with_name("mypy"))
ROOMS = sorted(p.name for p in (ROOT / "airlock").iterdir() if p.is_symlink())
_CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CONTRACTS = {c["id"]: c["name"] for c in _CONFIG["tool"]["importlinter"]["contracts"]}


def _run(
    command: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH comes before the editable install's finder, so `airlock` is the tree's.
    return _run([LINT_IMPORTS, "--no-cache"], tree, {**os.environ, "PYTHONPATH": str(tree)})


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
    (
        "tools/seam.py",
        "from airlock.sandbox.docker import DockerBackend",
        "backend-seam",
        "airlock.tools.seam -> airlock.sandbox.docker",
    ),
    ("sandbox/outcome.py", "import docker", "backend-seam", "airlock.sandbox.outcome -> docker"),
    ("egress/upward.py", "import mcp", "mcp", "airlock.egress.upward -> mcp"),
    (
        "tools/transport.py",
        "from mcp.server.mcpserver.exceptions import ToolError",
        "tools-transport",
        "airlock.tools.transport -> mcp",
    ),
    ("tools/upward.py", "import starlette", "transports", "airlock.tools.upward -> starlette"),
    (
        "policies/model/traffic.py",
        "from airlock.policies.model import egress",
        "policy-model",
        "airlock.policies.model.traffic -> airlock.policies.model.egress",
    ),
    (
        "store/queries/upward.py",
        "from airlock.store.database import Database",
        "store-backends",
        "airlock.store.queries.upward -> airlock.store.database",
    ),
    ("store/database/driver.py", "import psycopg", "store-sqlite", "airlock.store.database.driver"),
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


# ---- one name for each room, one check for each file ------------------------------------


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_refuses_to_import_under_its_top_level_name(
    room: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `python` started in the repository root (or `python -m pytest` there) has it.
    monkeypatch.syspath_prepend(str(ROOT))
    with pytest.raises(ImportError) as refused:
        importlib.import_module(room)
    assert str(refused.value) == (
        f"{room!r} is Airlock's room 'airlock.{room}' and must not be imported under another "
        f"name (its files would load twice); import 'airlock.{room}' from the installed "
        "package (`pip install -e .`) instead of putting the repository root on sys.path"
    )
    assert room not in sys.modules
    # The same path still gives the one name that works.
    assert importlib.import_module(f"airlock.{room}").__name__ == f"airlock.{room}"


def test_python_m_of_a_room_module_in_the_repository_root_names_the_fix() -> None:
    done = _run([sys.executable, "-m", "server.cli", "--help"], ROOT)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "import 'airlock.server' from the installed package" in done.stderr, done.stderr
    assert done.stdout == ""


def test_mypy_of_the_whole_tree_reports_an_error_once(tree: Path) -> None:
    (tree / "broker" / "seeded.py").write_text(
        'def answer() -> int:\n    return "forty-two"\n', encoding="utf-8"
    )
    done = _run([MYPY, "--cache-dir", str(tree / ".mypy_cache"), "."], tree, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    assert [line for line in done.stdout.splitlines() if "error:" in line] == [
        "airlock/broker/seeded.py:2: error: Incompatible return value type "
        '(got "str", expected "int")  [return-value]'
    ], done.stdout
