"""An independent client: the MCP Inspector CLI (Node) drives `airlock serve` over stdio
and `airlock serve --http` with a bearer key.

The Inspector is installed once into ~/.cache/airlock-tests/inspector (CI installs
it beforehand with the same command, see INSTALL). Without node and npm the test
skips locally and fails when AIRLOCK_REQUIRE_DOCKER=1 (CI), like the Docker tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from support import AIRLOCK, serving_http

from airlock.server.auth import generate_api_key

pytestmark = [pytest.mark.anyio, pytest.mark.docker]

REQUIRE_TOOLS = os.environ.get("AIRLOCK_REQUIRE_DOCKER") == "1"
INSPECTOR_VERSION = "2.12.0"
INSPECTOR_DIR = Path.home() / ".cache" / "airlock-tests" / "inspector"
INSTALL = [
    "npm",
    "install",
    "--no-audit",
    "--no-fund",
    "--prefix",
    str(INSPECTOR_DIR),
    f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}",
]
CALL_S = 120  # one Inspector run: node start, server start, one call


def _installed_version() -> str | None:
    package = INSPECTOR_DIR / "node_modules" / "@modelcontextprotocol" / "inspector"
    try:
        return str(json.loads((package / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The Inspector's command, installed on first use."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        reason = f"the MCP Inspector needs {' and '.join(missing)}"
        if REQUIRE_TOOLS:
            pytest.fail(f"{reason} (AIRLOCK_REQUIRE_DOCKER=1 requires it)")
        pytest.skip(reason)
    if _installed_version() != INSPECTOR_VERSION:
        done = subprocess.run(INSTALL, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            pytest.fail(f"{' '.join(INSTALL)} failed:\n{done.stdout}\n{done.stderr}")
    command = INSPECTOR_DIR / "node_modules" / ".bin" / "mcp-inspector"
    assert command.exists(), f"{command} missing after {' '.join(INSTALL)}"
    return command


async def run_inspector(
    inspector: Path, tmp_path: Path, era: str, *args: str
) -> tuple[dict[str, Any], str]:
    """One Inspector CLI run against a fresh `airlock serve`; its JSON result and stderr."""
    home = tmp_path / "home"  # the Inspector keeps state under ~/.mcp-inspector
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    if "DOCKER_HOST" in os.environ:
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    command = [
        str(inspector),
        "--cli",
        "--format",
        "json",
        "--protocol-era",
        era,
        *args,
        "--",
        AIRLOCK,
        "serve",
        "--data-dir",
        str(tmp_path / "data"),
    ]
    with anyio.fail_after(CALL_S):
        done = await anyio.run_process(command, env=env, check=False)
    stdout, stderr = done.stdout.decode(), done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"exit {done.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    output: dict[str, Any] = json.loads(stdout)
    return output, stderr


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_inspector_lists_the_tools_and_runs_code_over_stdio(
    inspector: Path, tmp_path: Path, era: str
) -> None:
    listed, log = await run_inspector(inspector, tmp_path, era, "--method", "tools/list")
    names = {tool["name"] for tool in listed["result"]["tools"]}
    assert {"run_code", "fetch_artifact", "end_session"} <= names, log

    called, log = await run_inspector(
        inspector,
        tmp_path,
        era,
        "--method",
        "tools/call",
        "--tool-name",
        "run_code",
        "--tool-args-json",
        json.dumps({"code": "print(6*7)"}),
    )
    result = called["result"]
    assert result["isError"] is False, log
    assert result["structuredContent"]["status"] == "ok", log
    assert result["structuredContent"]["stdout"]["text"] == "42\n"
    assert "42" in result["content"][0]["text"]


@asynccontextmanager
async def airlock_http_with_key(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """`airlock serve --http --auth FILE` with one API key; yields (MCP URL, key)."""
    key, digest = generate_api_key()
    auth = tmp_path / "auth.toml"
    auth.write_text(f'[[keys]]\nid = "acme-ci"\ntenant = "acme"\nhash = "{digest}"\n')
    async with serving_http("--auth", str(auth), "--data-dir", str(tmp_path / "data")) as serving:
        yield f"{serving.base}/mcp", key


async def run_inspector_http(
    inspector: Path, tmp_path: Path, url: str, *args: str
) -> tuple[int, str, str]:
    """One Inspector CLI run against `url`; its exit code, stdout and stderr.

    `--stored-auth-only`: without a usable token the Inspector fails with auth_required
    instead of starting an interactive OAuth login (a browser and a callback listener).
    """
    home = tmp_path / "home"  # the Inspector keeps state under ~/.mcp-inspector
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    command = [str(inspector), "--cli", "--format", "json", "--stored-auth-only"]
    command += ["--server-url", url, *args]  # the URL first: --header takes several values
    with anyio.fail_after(CALL_S):
        done = await anyio.run_process(command, env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode(errors="replace")


@pytest.mark.parametrize("era", [None, "modern"], ids=["default-era", "modern"])
async def test_inspector_calls_run_code_and_fetch_artifact_over_http_with_a_bearer_key(
    inspector: Path, tmp_path: Path, era: str | None
) -> None:
    era_args = [] if era is None else ["--protocol-era", era]  # the default is legacy
    async with airlock_http_with_key(tmp_path) as (url, key):
        bearer = ["--header", f"Authorization: Bearer {key}"]

        async def call(tool: str, arguments: dict[str, Any], *auth: str) -> tuple[int, str, str]:
            return await run_inspector_http(
                inspector,
                tmp_path,
                url,
                *era_args,
                "--method",
                "tools/call",
                "--tool-name",
                tool,
                "--tool-args-json",
                json.dumps(arguments),
                *auth,
            )

        code = "open('o.txt','w').write('hi'); print(6*7)"
        status, stdout, stderr = await call("run_code", {"code": code}, *bearer)
        assert status == 0, f"exit {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        ran = json.loads(stdout)["result"]
        assert ran["isError"] is False, stderr
        assert ran["structuredContent"]["status"] == "ok", stderr
        assert ran["structuredContent"]["stdout"]["text"] == "42\n"
        assert "42" in ran["content"][0]["text"]
        run_id = ran["structuredContent"]["run_id"]

        fetch = {"run_id": run_id, "path": "o.txt"}
        status, stdout, stderr = await call("fetch_artifact", fetch, *bearer)
        assert status == 0, f"exit {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        fetched = json.loads(stdout)["result"]
        assert fetched["isError"] is False, stderr
        assert fetched["structuredContent"]["size"] == 2
        assert "\nhi\n" in fetched["content"][0]["text"]

        status, stdout, stderr = await call("run_code", {"code": "print(1)"})
    assert status != 0, f"no key, yet exit 0\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert "auth_required" in stdout + stderr, f"stdout:\n{stdout}\nstderr:\n{stderr}"
