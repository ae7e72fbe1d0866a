"""docs/design.md stays true to the tree: every path it names exists, every test its threat
map names is a test, and nothing in the repository points at a design file a clone lacks."""

from __future__ import annotations

import re
import subprocess

from support import ROOT

DESIGN = ROOT / "docs" / "design.md"
# A path of ours in backticks: a room, the base, docs or tests, down to a file (with its
# suffix) or a folder (with its slash); `tools/list` is the MCP method, not a path.
PATH = re.compile(
    r"`((?:airlock|server|tools|sandbox|egress|broker|policies|store|bench|docs|tests)/"
    r"(?:[A-Za-z0-9_./-]*/|[A-Za-z0-9_./-]*\.[a-z]+))`"
)
# A test in the threat map: `test_file.py::test_name`, or `::test_name` after one.
TEST = re.compile(r"(test_[a-z0-9_]+\.py)?::(test_[a-z0-9_]+)")


def test_every_path_the_design_names_exists() -> None:
    named = set(PATH.findall(DESIGN.read_text()))
    assert len(named) > 20, named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == [], missing


def test_every_test_the_threat_map_names_exists() -> None:
    tests = {path.name: path.read_text() for path in (ROOT / "tests").rglob("test_*.py")}
    missing = []
    checked = 0
    for line in DESIGN.read_text().splitlines():
        current: str | None = None
        for module, name in TEST.findall(line):
            current = module or current
            assert current is not None, line
            checked += 1
            if f"def {name}(" not in tests.get(current, ""):
                missing.append(f"{current}::{name}")
    assert checked > 15
    assert missing == [], missing


def test_no_file_of_the_repository_points_at_a_missing_design_file() -> None:
    tracked = subprocess.run(
        ["git", "grep", "-l", "DESIGN" + ".md"], cwd=ROOT, capture_output=True, text=True
    )
    # git grep exits 1 when nothing matches.
    assert tracked.returncode == 1, tracked.stdout
