"""Tests list containers the way a shared engine allows: one may go between the list and its
inspection (a server removes its boxes as the test looks), and the Docker SDK's `list` then
raises NotFound unless told `ignore_removed=True` (a CI run failed so)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def _listings_without_ignore_removed(source: str) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "list"
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "containers"
            and not any(k.arg in ("ignore_removed", "sparse") for k in node.keywords)
        ):
            lines.append(node.lineno)
    return lines


def test_the_rule_sees_a_bare_listing() -> None:
    assert _listings_without_ignore_removed("c.containers.list(all=True)\n") == [1]
    assert _listings_without_ignore_removed("c.containers.list(ignore_removed=True)\n") == []


def test_every_container_listing_in_the_tests_ignores_removed_ones() -> None:
    found = {
        f"{path.relative_to(TESTS)}:{line}"
        for path in TESTS.rglob("*.py")
        for line in _listings_without_ignore_removed(path.read_text(encoding="utf-8"))
    }
    assert not found, f"pass ignore_removed=True to containers.list at {sorted(found)}"
