"""The README's promises that CI relies on."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```sh\n(.+?)\n```", readme, flags=re.DOTALL)


def test_readme_opens_with_the_serve_command_then_the_test_command() -> None:
    serve, test = _commands()[:2]
    assert serve.endswith("airlock serve")
    assert test.endswith("pytest")


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == _commands()[1]
